package v1alpha1_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestKVMUsableAt: KVM counts as usable on a node only while its agent says Usable in a fresh report.
func TestKVMUsableAt(t *testing.T) {
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	report := func(state vmv1.KVMState, reason string, age time.Duration) *vmv1.HypervisorNodeStatus {
		st := &vmv1.HypervisorNodeStatus{KVM: vmv1.KVMStatus{State: state, Reason: reason}}
		if age >= 0 {
			st.HeartbeatTime = metav1.NewTime(now.Add(-age))
		}
		return st
	}
	for name, tc := range map[string]struct {
		st     *vmv1.HypervisorNodeStatus
		usable bool
		why    string
	}{
		"usable, fresh":           {report(vmv1.KVMUsable, "", 30*time.Second), true, ""},
		"usable, at the limit":    {report(vmv1.KVMUsable, "", vmv1.ReportStaleAfter), true, ""},
		"usable, stale":           {report(vmv1.KVMUsable, "", vmv1.ReportStaleAfter+time.Second), false, "heartbeat 2m1s old (stale after 2m0s)"},
		"usable, never reported":  {report(vmv1.KVMUsable, "", -1), false, "no heartbeat yet"},
		"unusable":                {report(vmv1.KVMUnusable, "kvm_pvm", 0), false, "KVM Unusable: kvm_pvm"},
		"absent":                  {report(vmv1.KVMAbsent, "/dev/kvm does not exist", 0), false, "KVM Absent: /dev/kvm does not exist"},
		"unusable and stale":      {report(vmv1.KVMUnusable, "kvm_pvm", time.Hour), false, "KVM Unusable: kvm_pvm"},
		"no report of KVM at all": {&vmv1.HypervisorNodeStatus{HeartbeatTime: metav1.NewTime(now)}, false, "the node agent has not reported KVM"},
	} {
		usable, why := tc.st.KVMUsableAt(now)
		if usable != tc.usable || why != tc.why {
			t.Errorf("%s: KVMUsableAt = %v %q, want %v %q", name, usable, why, tc.usable, tc.why)
		}
	}
}
