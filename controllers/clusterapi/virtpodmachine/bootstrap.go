package virtpodmachine

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// setBootstrapSucceeded reports the guest's bootstrap from what its agent found
// (status.guest.bootstrap of the VM): the Cluster API sentinel, or cloud-init's end without it,
// or neither yet; Unknown while no guest runs or its agent does not answer. Pure.
func setBootstrapSucceeded(next *infrav1.VirtPodMachine, vm *vmv1.VirtualMachine) {
	c := metav1.Condition{Type: infrav1.BootstrapSucceededCondition, Status: metav1.ConditionUnknown, Reason: infrav1.ReasonBootstrapUnknown}
	agent := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionAgentConnected)
	var b *vmv1.GuestBootstrap
	if vm.Status.Guest != nil {
		b = vm.Status.Guest.Bootstrap
	}
	switch {
	case b != nil && b.Sentinel:
		c.Status, c.Reason = metav1.ConditionTrue, infrav1.ReasonBootstrapSucceeded
		c.Message = "the guest's bootstrap succeeded: " + vmv1.MessageBootstrapSentinel + " is there"
	case b != nil && b.CloudInitDone:
		c.Status, c.Reason = metav1.ConditionFalse, infrav1.ReasonBootstrapFailed
		c.Message = "cloud-init ended in VirtualMachine " + vm.Name + "'s guest without " + vmv1.MessageBootstrapSentinel
		if len(b.CloudInitErrors) > 0 {
			c.Message += ": " + strings.Join(b.CloudInitErrors, "; ")
		}
		c.Message += "; see the guest's console (vmctl console " + vm.Name + ") for kubeadm's output"
	case vm.Status.Phase != vmv1.PhaseRunning:
		c.Message = fmt.Sprintf("VirtualMachine %s is %s: no guest to ask", vm.Name, vm.Status.EffectivePhase())
	case agent == nil || agent.Status != metav1.ConditionTrue:
		c.Message = "the guest's qemu-guest-agent does not answer, so its bootstrap cannot be read"
		if agent != nil {
			c.Message += " (" + agent.Reason + ": " + agent.Message + ")"
		}
	default:
		c.Status, c.Reason = metav1.ConditionFalse, infrav1.ReasonBootstrapInProgress
		c.Message = "cloud-init has not ended yet in VirtualMachine " + vm.Name + "'s guest"
	}
	setCondition(next, c)
}
