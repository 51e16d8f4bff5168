package kvm

import (
	"strings"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestJudge: the tiny guest must run, and a kvm_pvm host is not usable even when it did; a
// guest that did not run keeps its own stage and reason.
func TestJudge(t *testing.T) {
	for name, tc := range map[string]struct {
		in               Result
		usable           bool
		stage, reasonHas string
	}{
		"hardware KVM":                {Result{GuestRan: true, Module: "kvm_intel", Stage: "done", Reason: "ran"}, true, "done", "ran"},
		"amd":                         {Result{GuestRan: true, Module: "kvm_amd", Stage: "done", Reason: "ran"}, true, "done", "ran"},
		"module unknown, guest ran":   {Result{GuestRan: true, Stage: "done", Reason: "ran"}, true, "done", "ran"},
		"kvm_pvm runs the tiny guest": {Result{GuestRan: true, Module: "kvm_pvm", Stage: "done", Reason: "ran"}, false, "host-module", "kvm_pvm"},
		"kvm_pvm, guest did not run":  {Result{Module: "kvm_pvm", Stage: "run", Reason: "did not halt"}, false, "run", "did not halt"},
		"guest failed on hardware":    {Result{Module: "kvm_intel", Stage: "long-mode", Reason: "triple fault"}, false, "long-mode", "triple fault"},
		"device did not open":         {Result{Stage: "open", Reason: "permission denied"}, false, "open", "permission denied"},
	} {
		got := judge(tc.in)
		if got.Usable != tc.usable || got.Stage != tc.stage || !strings.Contains(got.Reason, tc.reasonHas) || got.GuestRan != tc.in.GuestRan {
			t.Errorf("%s: judge = usable %v stage %q reason %q; want %v %q containing %q", name, got.Usable, got.Stage, got.Reason, tc.usable, tc.stage, tc.reasonHas)
		}
	}
}

// TestStatus: what the HypervisorNode says for each probe result.
func TestStatus(t *testing.T) {
	for name, tc := range map[string]struct {
		in   Result
		want vmv1.KVMStatus
	}{
		"absent":        {Result{Device: "/dev/kvm", Absent: true, Stage: "open", Reason: "stat /dev/kvm: no such file or directory"}, vmv1.KVMStatus{State: vmv1.KVMAbsent, Device: "/dev/kvm", Reason: "/dev/kvm does not exist"}},
		"usable":        {Result{Device: "/dev/kvm", Usable: true, Reason: "a real-mode and a 64-bit guest ran"}, vmv1.KVMStatus{State: vmv1.KVMUsable, Device: "/dev/kvm"}},
		"unusable":      {Result{Device: "/dev/kvm", Stage: "host-module", Reason: pvmReason}, vmv1.KVMStatus{State: vmv1.KVMUnusable, Device: "/dev/kvm", Reason: pvmReason}},
		"no permission": {Result{Device: "/dev/kvm", Stage: "open", Reason: "open: permission denied"}, vmv1.KVMStatus{State: vmv1.KVMUnusable, Device: "/dev/kvm", Reason: "open: permission denied"}},
	} {
		if got := tc.in.Status(); got != tc.want {
			t.Errorf("%s: Status() = %+v, want %+v", name, got, tc.want)
		}
	}
}
