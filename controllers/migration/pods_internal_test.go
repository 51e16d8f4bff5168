package migration

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestUnschedulable: the scheduler's refusal fails a migration, except that a claim the
// migration made not yet in the scheduler's cache is waited for (it tries the pod again once
// it sees the claim); a bound pod is never unschedulable.
func TestUnschedulable(t *testing.T) {
	claims := []vmv1.MigratedClaim{{Disk: "root", Source: "web-root", Target: "web-root-m1a2b3"}}
	pod := func(node, msg string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: node}}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}}
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"no node fits", pod("", "0/2 nodes are available: 1 Insufficient memory, 1 node(s) were unschedulable."), true},
		{"the migration's claim not seen yet", pod("", `0/2 nodes are available: persistentvolumeclaim "web-root-m1a2b3" not found. not found`), false},
		{"another claim not found", pod("", `0/2 nodes are available: persistentvolumeclaim "web-data" not found. not found`), true},
		{"bound", pod("node-a", "stale"), false},
	} {
		if _, got := unschedulable(tc.pod, claims); got != tc.want {
			t.Errorf("%s: unschedulable %v, want %v", tc.name, got, tc.want)
		}
	}
}
