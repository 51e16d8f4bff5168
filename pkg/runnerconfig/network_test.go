package runnerconfig_test

import (
	"slices"
	"strings"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
)

// TestNetworkModes: pod, masquerade and none validate and read back from --network; a readiness
// probe needs a guest network (pod or masquerade); anything else is refused naming the modes.
func TestNetworkModes(t *testing.T) {
	for _, tc := range []struct {
		mode vmv1.NetworkMode
		flag string // the flag's spelling, which runner pods of earlier releases keep
	}{{vmv1.NetworkPod, "pod"}, {vmv1.NetworkMasquerade, "masquerade"}, {vmv1.NetworkNone, "none"}} {
		mode := tc.mode
		c := firmwareConfig("")
		c.Network = mode
		if mode != vmv1.NetworkNone {
			c.ReadinessProbe = runnerconfig.Probe{Kind: "tcp", Port: 22}
		}
		if err := c.Validate(); err != nil {
			t.Errorf("--network=%s: %v", tc.flag, err)
		}
		args := c.Args()
		if !slices.Contains(args, "--network="+tc.flag) {
			t.Errorf("--network=%s: Args %q", tc.flag, args)
		}
		if got, err := runnerconfigtest.Parse(args); err != nil || got.Network != mode {
			t.Errorf("--network=%s: read back %q, %v", tc.flag, got.Network, err)
		}
	}
	c := firmwareConfig("")
	c.Network = "bridge"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--network: \"bridge\" is not a network mode; use pod, masquerade or none") {
		t.Errorf("--network=bridge: Validate() = %v", err)
	}
}

// TestNetworkFlag: --network reads the modes in their flag spelling only, naming the flag and
// the modes when it refuses one; an empty one, or none, is the default, pod.
func TestNetworkFlag(t *testing.T) {
	base := firmwareConfig("").Args()
	without := slices.DeleteFunc(slices.Clone(base), func(a string) bool { return strings.HasPrefix(a, "--network=") })
	for _, args := range [][]string{without, append(slices.Clone(without), "--network=")} {
		if got, err := runnerconfigtest.Parse(args); err != nil || got.Network != vmv1.NetworkPod {
			t.Errorf("Parse(%q) = %q, %v; want the default, %q", args, got.Network, err, vmv1.NetworkPod)
		}
	}
	for _, v := range []string{"bridge", "Pod", "Masquerade", "None", "POD"} {
		_, err := runnerconfigtest.Parse(append(slices.Clone(without), "--network="+v))
		if err == nil || !strings.Contains(err.Error(), "network") || !strings.Contains(err.Error(), "use pod, masquerade or none") {
			t.Errorf("--network=%s: Parse() = %v, want an error naming the flag and the modes", v, err)
		}
	}
}
