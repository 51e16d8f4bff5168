package runnerconfig_test

import (
	"slices"
	"strings"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
)

func displayConfig(display string) runnerconfig.Config {
	c := runnerconfig.Config{Name: "web", GuestSize: vmv1.GuestSize{CPUs: 1, MemoryMiB: 512}, Kernel: "/k", RootDisk: "/d", Display: display}
	c.Defaults()
	return c
}

// TestDisplayRoundTrip: --display=vnc is rendered and read back; none is the flag's default, so
// a pod made before the flag (whose argv a migration target copies) means no display, and none
// renders nothing, the argv of old.
func TestDisplayRoundTrip(t *testing.T) {
	vnc := displayConfig(runnerconfig.DisplayVNC)
	if args := vnc.Args(); !slices.Contains(args, "--display=vnc") {
		t.Errorf("a display renders %q, want --display=vnc", args)
	}
	if got, err := runnerconfigtest.Parse(vnc.Args()); err != nil || got.Display != runnerconfig.DisplayVNC {
		t.Errorf("--display=vnc reads back as %q, %v", got.Display, err)
	}
	for _, d := range []string{"", runnerconfig.DisplayNone} {
		c := displayConfig(d)
		if c.Display != runnerconfig.DisplayNone || slices.ContainsFunc(c.Args(), func(a string) bool { return strings.HasPrefix(a, "--display") }) {
			t.Errorf("display %q: defaults to %q and renders %q; want none and no flag", d, c.Display, c.Args())
		}
	}
	old, err := runnerconfigtest.Parse([]string{"--name=web", "--cpus=1", "--memory-mib=512", "--kernel=/k", "--root-disk=/d"})
	if err != nil || old.Display != runnerconfig.DisplayNone {
		t.Errorf("a pod's argv without --display reads as display %q, %v; want none", old.Display, err)
	}
}

func TestDisplayValidation(t *testing.T) {
	bad := displayConfig("spice")
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `--display: "spice" is not a display; use vnc or none`) {
		t.Errorf("an unknown display: %v", err)
	}
	ch := displayConfig(runnerconfig.DisplayVNC)
	ch.Provider = runnerconfig.ProviderCloudHypervisor
	if err := ch.Validate(); err == nil || !strings.Contains(err.Error(), "--display=vnc: only for provider qemu (cloud-hypervisor has no VNC server)") {
		t.Errorf("vnc under cloud-hypervisor: %v", err)
	}
	ch.Display = runnerconfig.DisplayNone
	if err := ch.Validate(); err != nil {
		t.Errorf("cloud-hypervisor without a display: %v", err)
	}
}
