package migration

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// What the controller reads off the two runner pods: the kubelet's and the scheduler's word on
// them, and the node agents' annotations (apis/vm/v1alpha1/migration.go).

// sourceState is what the source agent reported (its migration-state annotation: the source
// runner's control-API status); zero when nothing (or nothing readable) yet.
func sourceState(pod *corev1.Pod) controlapi.MigrationStatus {
	var s controlapi.MigrationStatus
	if pod == nil || pod.Annotations[vmv1.AnnotationMigrateTo] == "" {
		return s // a report from before this send is not about it
	}
	_ = json.Unmarshal([]byte(pod.Annotations[vmv1.AnnotationMigrationState]), &s)
	return s
}

// ours says pod is marked as part of the migration of this UID.
func ours(pod *corev1.Pod, uid string) bool {
	return pod != nil && pod.Annotations[vmv1.AnnotationMigration] == uid
}

// alive is a pod that may still run its guest: not ended, not being deleted.
func alive(pod *corev1.Pod) bool {
	return pod != nil && pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// started says the runner's startup probe passed: on a target, the guest runs there, which the
// runner allows only once the incoming stream completed (the source is paused then).
func started(pod *corev1.Pod) bool {
	if pod == nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	c := runnerpod.Status(pod)
	return c != nil && c.Started != nil && *c.Started && c.State.Running != nil
}

// unschedulable is the scheduler's refusal of a pod, in its words. A refusal for a claim the
// migration made (claims) not being found is not one: the claims are made before the pod, and
// the scheduler's cache can lag behind them; it tries the pod again once it sees the claim.
func unschedulable(pod *corev1.Pod, claims []vmv1.MigratedClaim) (string, bool) {
	if pod.Spec.NodeName != "" {
		return "", false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			for _, cl := range claims {
				if strings.Contains(c.Message, `persistentvolumeclaim "`+cl.Target+`" not found`) {
					return "", false
				}
			}
			return c.Message, true
		}
	}
	return "", false
}

// ended describes how a pod that will not run the guest ended (its runner's words when it has).
func ended(pod *corev1.Pod) string {
	switch {
	case pod == nil:
		return "deleted"
	case pod.DeletionTimestamp != nil:
		return "being deleted"
	}
	if t := runnerpod.Terminated(pod); t != nil {
		msg := "ended (" + t.Reason
		if t.Message != "" {
			msg += ": " + t.Message
		}
		return msg + ")"
	}
	return "ended (phase " + string(pod.Status.Phase) + ")"
}

// notRunning says why the VM's guest cannot be a migration's source now, as a reason and a
// message; "" when it can. vm and source are nil when gone.
func notRunning(mig *vmv1.VirtualMachineMigration, vm *vmv1.VirtualMachine, source *corev1.Pod) (reason, message string) {
	switch {
	case vm == nil:
		return vmv1.ReasonVMNotFound, fmt.Sprintf("no VirtualMachine %s in namespace %s: check spec.vmName", mig.Spec.VMName, mig.Namespace)
	case vm.DeletionTimestamp != nil:
		return vmv1.ReasonVMDeleted, fmt.Sprintf("VirtualMachine %s is being deleted", vm.Name)
	case vm.Status.Phase != vmv1.PhaseRunning:
		return vmv1.ReasonNotMigratable, fmt.Sprintf("the guest of VirtualMachine %s is not running (phase %s): only a running guest migrates", vm.Name, vm.Status.Phase)
	case source == nil || string(source.UID) != vm.Status.PodUID || !alive(source):
		return vmv1.ReasonNotMigratable, fmt.Sprintf("the runner pod %s of VirtualMachine %s is ending or replaced: only a running guest migrates; try again once the VM runs in its new pod", vm.Status.PodName, vm.Name)
	case !started(source):
		return vmv1.ReasonNotMigratable, fmt.Sprintf("the guest of VirtualMachine %s is still starting: its runner pod %s has not passed its startup probe; try again in a few seconds", vm.Name, source.Name)
	}
	return "", ""
}

// onTrack says nothing in this view of a started migration would end it: the VM is there, both
// pods are marked as this migration's and alive, and the scheduler has not refused the target.
func onTrack(mig *vmv1.VirtualMachineMigration, vm *vmv1.VirtualMachine, p pods) bool {
	uid := string(mig.UID)
	if vm == nil || vm.DeletionTimestamp != nil || !ours(p.source, uid) || !alive(p.source) || !ours(p.target, uid) || !alive(p.target) {
		return false
	}
	_, refused := unschedulable(p.target, mig.Status.Claims)
	return !refused
}
