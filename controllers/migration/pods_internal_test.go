package migration

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

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

// TestNotRunning: why a VM's guest cannot be a migration's source now, in words that match what
// the user sees: a guest still starting (phase Running, the startup probe not passed) is said to
// be starting, not "not running (phase Running)".
func TestNotRunning(t *testing.T) {
	mig := &vmv1.VirtualMachineMigration{Spec: vmv1.VirtualMachineMigrationSpec{VMName: "demo"}}
	mig.Namespace = "ns"
	vm := func(phase vmv1.Phase) *vmv1.VirtualMachine {
		v := &vmv1.VirtualMachine{Status: vmv1.VirtualMachineStatus{Phase: phase, PodName: "demo-runner", PodUID: "u1"}}
		v.Name = "demo"
		return v
	}
	pod := func(uid string, started bool) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: vmv1.RunnerContainer,
			Started: &started, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
		p.Name, p.UID = "demo-runner", types.UID(uid)
		return p
	}
	for _, tc := range []struct {
		name         string
		vm           *vmv1.VirtualMachine
		pod          *corev1.Pod
		reason, text string
	}{
		{"no VM", nil, nil, vmv1.ReasonVMNotFound, "no VirtualMachine demo in namespace ns: check spec.vmName"},
		{"stopped", vm(vmv1.PhaseStopped), nil, vmv1.ReasonNotMigratable, "the guest of VirtualMachine demo is not running (phase Stopped): only a running guest migrates"},
		{"starting", vm(vmv1.PhaseRunning), pod("u1", false), vmv1.ReasonNotMigratable,
			"the guest of VirtualMachine demo is still starting: its runner pod demo-runner has not passed its startup probe; try again in a few seconds"},
		{"replaced", vm(vmv1.PhaseRunning), pod("u0", true), vmv1.ReasonNotMigratable,
			"the runner pod demo-runner of VirtualMachine demo is ending or replaced: only a running guest migrates; try again once the VM runs in its new pod"},
		{"running", vm(vmv1.PhaseRunning), pod("u1", true), "", ""},
	} {
		if reason, text := notRunning(mig, tc.vm, tc.pod); reason != tc.reason || text != tc.text {
			t.Errorf("%s: %q %q, want %q %q", tc.name, reason, text, tc.reason, tc.text)
		}
	}
}
