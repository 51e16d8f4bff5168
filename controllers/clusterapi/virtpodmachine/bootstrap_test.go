package virtpodmachine

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestBootstrapSucceeded: what the VirtPodMachine says of its guest's bootstrap, from what the
// guest agent found, in each state a worker can be in.
func TestBootstrapSucceeded(t *testing.T) {
	agent := func(status metav1.ConditionStatus, reason string) []metav1.Condition {
		return []metav1.Condition{{Type: vmv1.ConditionAgentConnected, Status: status, Reason: reason, Message: "says " + reason}}
	}
	running := func(b *vmv1.GuestBootstrap, conds []metav1.Condition) *vmv1.VirtualMachine {
		vm := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "w-1"}}
		vm.Status.Phase, vm.Status.Conditions = vmv1.PhaseRunning, conds
		vm.Status.Guest = &vmv1.GuestStatus{Bootstrap: b}
		return vm
	}
	connected := agent(metav1.ConditionTrue, vmv1.ReasonAgentConnected)
	for _, tc := range []struct {
		name   string
		vm     *vmv1.VirtualMachine
		status metav1.ConditionStatus
		reason string
		words  string
	}{
		{"joined", running(&vmv1.GuestBootstrap{Sentinel: true, CloudInitDone: true}, connected), metav1.ConditionTrue, infrav1.ReasonBootstrapSucceeded,
			"bootstrap succeeded: /run/cluster-api/bootstrap-success.complete is there"},
		{"join failed", running(&vmv1.GuestBootstrap{CloudInitDone: true, CloudInitErrors: []string{"runcmd failed", "kubeadm exited 1"}}, connected),
			metav1.ConditionFalse, infrav1.ReasonBootstrapFailed, "cloud-init ended in VirtualMachine w-1's guest without /run/cluster-api/bootstrap-success.complete: runcmd failed; kubeadm exited 1; see the guest's console (vmctl console w-1)"},
		{"still booting", running(nil, connected), metav1.ConditionFalse, infrav1.ReasonBootstrapInProgress, "cloud-init has not ended yet"},
		{"no agent", running(nil, agent(metav1.ConditionFalse, vmv1.ReasonAgentNotConnected)), metav1.ConditionUnknown, infrav1.ReasonBootstrapUnknown,
			"qemu-guest-agent does not answer, so its bootstrap cannot be read (AgentNotConnected: says AgentNotConnected)"},
		{"no agent condition yet", running(nil, nil), metav1.ConditionUnknown, infrav1.ReasonBootstrapUnknown, "does not answer"},
		{"not running", &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "w-1"}, Status: vmv1.VirtualMachineStatus{Phase: vmv1.PhaseStarting}},
			metav1.ConditionUnknown, infrav1.ReasonBootstrapUnknown, "VirtualMachine w-1 is Starting: no guest to ask"},
		{"succeeded, then stopped: the last word stands", &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "w-1"}, Status: vmv1.VirtualMachineStatus{Phase: vmv1.PhaseStopping,
			Guest: &vmv1.GuestStatus{Bootstrap: &vmv1.GuestBootstrap{Sentinel: true}}}}, metav1.ConditionTrue, infrav1.ReasonBootstrapSucceeded, "succeeded"},
	} {
		next := &infrav1.VirtPodMachine{}
		setBootstrapSucceeded(next, tc.vm)
		c := meta.FindStatusCondition(next.Status.Conditions, infrav1.BootstrapSucceededCondition)
		if c == nil || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.words) {
			t.Errorf("%s: %+v\nwant %s %s with %q", tc.name, c, tc.status, tc.reason, tc.words)
		}
	}
}
