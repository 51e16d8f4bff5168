package runnerconfig_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
)

func resizeConfig(maxCPUs int32, maxMiB int64) runnerconfig.Config {
	c := runnerconfig.Config{Name: "web", CPUs: 1, MemoryMiB: 256, RootDisk: "/d", MaxCPUs: maxCPUs, MaxMemoryMiB: maxMiB,
		ControlSocket: runnerconfig.DefaultControlSocket}
	c.Defaults()
	return c
}

// TestResizeFlags: a guest with room to grow gets --max-cpus and --max-memory (MiB) and reads
// them back; one without gets neither; --max-memory also takes a quantity; bad bounds are
// refused naming the flag.
func TestResizeFlags(t *testing.T) {
	grow := resizeConfig(4, 1024)
	args := grow.Args()
	for _, want := range []string{"--max-cpus=4", "--max-memory=1024", "--control-socket=/run/virtpod/control/runner.sock"} {
		if !slices.Contains(args, want) {
			t.Errorf("Args %q lack %s", args, want)
		}
	}
	got, err := runnerconfigtest.Parse(args)
	if err != nil || !reflect.DeepEqual(got, grow) {
		t.Fatalf("read back %+v, %v; want %+v", got, err, grow)
	}
	fixed := resizeConfig(0, 0)
	if slices.ContainsFunc(fixed.Args(), func(a string) bool { return strings.HasPrefix(a, "--max-") }) {
		t.Errorf("a fixed-size guest gets --max-* flags: %q", fixed.Args())
	}
	if c, err := runnerconfigtest.Parse([]string{"--name=web", "--cpus=1", "--memory-mib=256", "--root-disk=/d", "--max-memory=1Gi"}); err != nil || c.MaxMemoryMiB != 1024 {
		t.Errorf("--max-memory=1Gi read as %d MiB, %v", c.MaxMemoryMiB, err)
	}
	for flags, want := range map[string]string{
		"--max-cpus=0":      "",
		"--max-memory=300":  "multiples of 128 MiB",
		"--max-memory=128":  "--max-memory: 128 MiB is below --memory-mib 256",
		"--max-memory=big":  "neither a number of MiB nor a quantity",
		"--max-cpus=2":      "",
		"--max-memory=2Gi":  "",
		"--control-socket=": "",
	} {
		_, err := runnerconfigtest.Parse([]string{"--name=web", "--cpus=2", "--memory-mib=256", "--root-disk=/d", flags})
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", flags, err, want)
		}
	}
}
