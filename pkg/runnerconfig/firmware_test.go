package runnerconfig_test

import (
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"slices"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
)

func firmwareConfig(firmware string) runnerconfig.Config {
	c := runnerconfig.Config{Name: "debian", GuestSize: vmv1.GuestSize{CPUs: 1, MemoryMiB: 512}, RootDisk: "/virtpod/images/disk/disk/root.img", Firmware: firmware}
	c.Defaults()
	return c
}

// TestFirmwareRoundTrip: without --kernel the runner boots the disk through --firmware, bios
// unless told otherwise, and the flags read back unchanged.
func TestFirmwareRoundTrip(t *testing.T) {
	for _, fw := range []string{"", runnerconfig.FirmwareBIOS, runnerconfig.FirmwareUEFI} {
		want := firmwareConfig(fw)
		args := want.Args()
		wantFlag := "--firmware=" + want.Firmware
		if fw == "" && want.Firmware != runnerconfig.FirmwareBIOS {
			t.Errorf("no kernel and no firmware defaults to %q, want bios", want.Firmware)
		}
		if !slices.Contains(args, wantFlag) || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--kernel") }) {
			t.Errorf("firmware %q: Args %q, want %s and no --kernel", fw, args, wantFlag)
		}
		got, err := runnerconfigtest.Parse(args)
		if err != nil {
			t.Fatalf("firmware %q: %v", fw, err)
		}
		if got.Firmware != want.Firmware || got.Kernel != "" {
			t.Errorf("firmware %q: read back %q, kernel %q", fw, got.Firmware, got.Kernel)
		}
	}
	// A kernel boot renders no --firmware and gets none by default.
	k := firmwareConfig("")
	k.Kernel, k.Firmware = "/k", ""
	k.Defaults()
	if slices.ContainsFunc(k.Args(), func(a string) bool { return strings.HasPrefix(a, "--firmware") }) || k.Firmware != "" {
		t.Errorf("a kernel boot renders %q", k.Args())
	}
}

func TestFirmwareValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*runnerconfig.Config)
		want   string
	}{
		"unknown firmware":      {func(c *runnerconfig.Config) { c.Firmware = "coreboot" }, "--firmware: \"coreboot\" is not a firmware"},
		"kernel and firmware":   {func(c *runnerconfig.Config) { c.Kernel = "/k" }, "--firmware: only without --kernel"},
		"initrd without kernel": {func(c *runnerconfig.Config) { c.Initrd = "/i" }, "need --kernel"},
		"args without kernel":   {func(c *runnerconfig.Config) { c.KernelArgs = "quiet" }, "need --kernel"},
	} {
		c := firmwareConfig(runnerconfig.FirmwareUEFI)
		tc.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error saying %q", name, err, tc.want)
		}
	}
}
