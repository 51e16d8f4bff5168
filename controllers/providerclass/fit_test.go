package providerclass

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestUntilStale: the controller comes back when the next fresh report would go stale, and not
// at all when none is fresh.
func TestUntilStale(t *testing.T) {
	now := time.Now()
	at := func(ago time.Duration) vmv1.HypervisorNode {
		return vmv1.HypervisorNode{Status: vmv1.HypervisorNodeStatus{HeartbeatTime: metav1.NewTime(now.Add(-ago))}}
	}
	if got := untilStale([]vmv1.HypervisorNode{at(time.Minute), at(2 * time.Minute), at(time.Hour)}, now); got != time.Minute+time.Second {
		t.Fatalf("untilStale = %s, want 1m1s", got)
	}
	if got := untilStale([]vmv1.HypervisorNode{at(time.Hour)}, now); got != 0 {
		t.Fatalf("untilStale with only stale reports = %s, want 0 (no timer)", got)
	}
}
