package runnerconfig

import (
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"slices"
	"strings"
	"testing"
)

func resizable() Config {
	c := Config{Name: "vm", GuestSize: vmv1.GuestSize{CPUs: 1, MemoryMiB: 256, MaxCPUs: 4, MaxMemoryMiB: 1024}, Kernel: "/k", RootDisk: "/d", ControlSocket: DefaultControlSocket}
	c.Defaults()
	return c
}

// TestResizeFlags: the resize bounds render as flags, the default control socket is left to the
// flag's default, and "" (none) is said explicitly.
func TestResizeFlags(t *testing.T) {
	c := resizable()
	args := c.Args()
	for _, want := range []string{"--max-cpus=4", "--max-memory-mib=1024"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	for _, a := range args {
		if strings.HasPrefix(a, "--control-socket") {
			t.Errorf("the default control socket was rendered: %s", a)
		}
	}
	c.ControlSocket = ""
	if !slices.Contains(c.Args(), "--control-socket=") {
		t.Errorf("no control socket is not rendered as --control-socket=: %q", c.Args())
	}
	fixed := resizable()
	fixed.MaxCPUs, fixed.MaxMemoryMiB = 0, 0
	for _, a := range fixed.Args() {
		if strings.HasPrefix(a, "--max-") {
			t.Errorf("a fixed-size guest got %s", a)
		}
	}
}

func TestResizeRejects(t *testing.T) {
	for flag, mutate := range map[string]func(*Config){
		"--max-cpus":                     func(c *Config) { c.MaxCPUs = 0; c.CPUs, c.MaxCPUs = 2, 1 },
		"--max-cpus: 256":                func(c *Config) { c.MaxCPUs = 256 },
		"--max-memory-mib: 128":          func(c *Config) { c.MaxMemoryMiB = 128 },
		"--memory-mib, --max-memory-mib": func(c *Config) { c.MaxMemoryMiB = 1000 },
		"--control-socket":               func(c *Config) { c.ControlSocket = "run/x.sock" },
	} {
		c := resizable()
		mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), strings.SplitN(flag, ":", 2)[0]) {
			t.Errorf("%s: Validate() = %v, want an error naming the flag", flag, err)
		}
	}
}
