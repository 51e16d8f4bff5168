package v1alpha1_test

import (
	"strings"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestNetworkFlag: each mode has one --network spelling, lower case, which reads back as the
// mode; the spelling is what runner pods of earlier releases carry, so it never changes.
// Anything else is refused naming the modes; a mode without a spelling is rendered unchanged.
func TestNetworkFlag(t *testing.T) {
	for _, tc := range []struct {
		mode vmv1.NetworkMode
		flag string
	}{
		{vmv1.NetworkPod, "pod"},
		{vmv1.NetworkMasquerade, "masquerade"},
		{vmv1.NetworkNone, "none"},
	} {
		if got := tc.mode.Flag(); got != tc.flag {
			t.Errorf("%q.Flag() = %q, want %q", tc.mode, got, tc.flag)
		}
		if got, err := vmv1.ParseNetworkFlag(tc.flag); err != nil || got != tc.mode {
			t.Errorf("ParseNetworkFlag(%q) = %q, %v; want %q", tc.flag, got, err, tc.mode)
		}
	}
	for _, s := range []string{"", "Pod", "Masquerade", "None", "POD", "bridge", " pod", "pod "} {
		got, err := vmv1.ParseNetworkFlag(s)
		if err == nil || got != "" || !strings.Contains(err.Error(), "use pod, masquerade or none") {
			t.Errorf("ParseNetworkFlag(%q) = %q, %v; want an error naming the modes", s, got, err)
		}
	}
	for _, m := range []vmv1.NetworkMode{"", "Bridge", "pod"} {
		if got := m.Flag(); got != string(m) {
			t.Errorf("%q.Flag() = %q, want it unchanged", m, got)
		}
	}
}
