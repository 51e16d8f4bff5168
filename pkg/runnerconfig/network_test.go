package runnerconfig_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
)

// TestNetworkModes: pod, masquerade and none validate and read back from --network; a readiness
// probe needs a guest network (pod or masquerade); anything else is refused naming the modes.
func TestNetworkModes(t *testing.T) {
	for _, mode := range []string{runnerconfig.NetworkPod, runnerconfig.NetworkMasquerade, runnerconfig.NetworkNone} {
		c := firmwareConfig("")
		c.Network = mode
		if mode != runnerconfig.NetworkNone {
			c.ReadinessProbe = runnerconfig.Probe{Kind: "tcp", Port: 22}
		}
		if err := c.Validate(); err != nil {
			t.Errorf("--network=%s: %v", mode, err)
		}
		args := c.Args()
		if !slices.Contains(args, "--network="+mode) {
			t.Errorf("--network=%s: Args %q", mode, args)
		}
		if got, err := runnerconfigtest.Parse(args); err != nil || got.Network != mode {
			t.Errorf("--network=%s: read back %q, %v", mode, got.Network, err)
		}
	}
	c := firmwareConfig("")
	c.Network = "bridge"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--network: \"bridge\" is not a network mode; use pod, masquerade or none") {
		t.Errorf("--network=bridge: Validate() = %v", err)
	}
}
