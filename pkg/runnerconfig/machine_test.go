package runnerconfig_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
)

// TestMachineRoundTrip: a pinned machine type renders as --machine and reads back; none renders
// nothing (QEMU's q35).
func TestMachineRoundTrip(t *testing.T) {
	for _, m := range []string{"", "q35", "pc-q35-7.2", "pc-q35-10.0"} {
		want := firmwareConfig("")
		want.Machine = m
		args := want.Args()
		if has := slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--machine") }); has != (m != "") {
			t.Errorf("machine %q: Args %q", m, args)
		}
		got, err := runnerconfigtest.Parse(args)
		if err != nil || got.Machine != m {
			t.Errorf("machine %q: read back %q, %v", m, got.Machine, err)
		}
	}
}

// TestMachineRefused: only q35 machine types, written plainly, and only for QEMU.
func TestMachineRefused(t *testing.T) {
	for m, want := range map[string]string{
		"pc-q35-7.2,accel=kvm": "is not a q35 machine type",
		"pc-i440fx-7.2":        "is not a q35 machine type",
		"microvm":              "is not a q35 machine type",
	} {
		c := firmwareConfig("")
		c.Machine = m
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--machine: \""+m+"\" "+want) {
			t.Errorf("machine %q: Validate() = %v", m, err)
		}
	}
	c := firmwareConfig("")
	c.Machine, c.Provider = "pc-q35-7.2", runnerconfig.ProviderCloudHypervisor
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--machine: only for provider qemu") {
		t.Errorf("cloud-hypervisor with a machine: %v", err)
	}
}

// TestMachineRun: the machine a guest runs on is the pinned one, else what q35 is in the QEMU
// that runs it; nothing for cloud-hypervisor.
func TestMachineRun(t *testing.T) {
	for _, tc := range []struct{ provider, machine, version, want string }{
		{runnerconfig.ProviderQEMU, "", "10.0.13", "pc-q35-10.0"},
		{runnerconfig.ProviderQEMU, "q35", "7.2.22", "pc-q35-7.2"},
		{runnerconfig.ProviderQEMU, "pc-q35-7.2", "10.0.13", "pc-q35-7.2"},
		{runnerconfig.ProviderQEMU, "", "", ""},
		{runnerconfig.ProviderCloudHypervisor, "", "48.0", ""},
	} {
		c := runnerconfig.Config{Provider: tc.provider, Machine: tc.machine}
		if got := c.MachineRun(tc.version); got != tc.want {
			t.Errorf("provider %s, --machine %q, QEMU %q: MachineRun %q, want %q", tc.provider, tc.machine, tc.version, got, tc.want)
		}
	}
}
