package runnerconfig_test

import (
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"slices"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
)

func seedConfig() runnerconfig.Config {
	c := runnerconfig.Config{
		Name: "web", GuestSize: vmv1.GuestSize{CPUs: 1, MemoryMiB: 256}, Kernel: "/k", RootDisk: "/d",
		InstanceID:           "0b5f6a43-1111-2222-3333-444455556666",
		CloudInitUserData:    "/virtpod/cloud-init/user-data",
		CloudInitNetworkData: "/virtpod/cloud-init/network-config",
	}
	c.Defaults()
	return c
}

// TestCloudInitRoundTrip: the seed's flags carry paths and the instance-id only, and the runner
// reads them back unchanged.
func TestCloudInitRoundTrip(t *testing.T) {
	want := seedConfig()
	args := want.Args()
	for _, a := range []string{"--instance-id=" + want.InstanceID, "--cloud-init-user-data=" + want.CloudInitUserData, "--cloud-init-network-data=" + want.CloudInitNetworkData} {
		if !slices.Contains(args, a) {
			t.Errorf("Args lacks %q: %q", a, args)
		}
	}
	got, err := runnerconfigtest.Parse(args)
	if err != nil {
		t.Fatal(err)
	}
	if got.InstanceID != want.InstanceID || got.CloudInitUserData != want.CloudInitUserData || got.CloudInitNetworkData != want.CloudInitNetworkData {
		t.Fatalf("round trip changed the seed's flags:\n got %+v\nwant %+v", got, want)
	}
	// Without a seed, no seed flag is rendered.
	plain := seedConfig()
	plain.InstanceID, plain.CloudInitUserData, plain.CloudInitNetworkData = "", "", ""
	for _, a := range plain.Args() {
		if strings.HasPrefix(a, "--cloud-init") || strings.HasPrefix(a, "--instance-id") {
			t.Errorf("a configuration without a seed renders %q", a)
		}
	}
}

func TestCloudInitValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*runnerconfig.Config)
		want   string
	}{
		"network data alone": {func(c *runnerconfig.Config) { c.CloudInitUserData = "" }, "--cloud-init-network-data: needs --cloud-init-user-data"},
		"no instance-id":     {func(c *runnerconfig.Config) { c.InstanceID = "" }, "--instance-id: required with --cloud-init-user-data"},
	} {
		c := seedConfig()
		tc.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error saying %q", name, err, tc.want)
		}
	}
	c := seedConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("a complete seed configuration is refused: %v", err)
	}
}
