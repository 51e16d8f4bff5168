package vm

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/statuspatch"
)

// What the user asks of the guest's power: runStrategy Halted stops it, a run request
// (spec.runRequestedAt) restarts it or starts an ended run again. Both act like the restart
// policy does: status first, guarded by the VM's resourceVersion, then the pod's delete, so a
// controller killed in between neither loses the request nor counts it twice.

// Spec fields whose field manager the events name.
const (
	fieldRunStrategy    = "runStrategy"
	fieldRunRequestedAt = "runRequestedAt"
)

// stop powers the guest down for runStrategy Halted. Status first: the pod is let go of
// (status.podUID cleared), so its disappearance is a stop, not a failure, even if the strategy
// changes again before it is gone. Then the delete, with the pod's grace period, which the
// runner spends on the guest's ACPI power-down; virtpod never forces it.
func (r *Reconciler) stop(ctx context.Context, vm, next *vmv1.VirtualMachine, pod *corev1.Pod) error {
	next.Status.PodUID = ""
	if err := r.letGo(ctx, vm, next); err != nil {
		return err
	}
	if !podEnded(pod) {
		r.Recorder.Eventf(vm, pod, corev1.EventTypeNormal, "Stopping", "Stop", "Powering the guest down %s(runStrategy Halted): runner pod %s deleted with its grace period; the guest has %ds to power off",
			by(vm, fieldRunStrategy), pod.Name, guestGrace(vm))
	}
	return r.deleteOnPurpose(ctx, pod)
}

// rerun acts on a run request: it counts the request (userRestartCount, lastRunRequest) and
// replaces the run, a running guest powered down cleanly through its pod's grace period, an
// ended run's pod removed. pod is nil when the ended run's pod is gone already. A request
// counted before (the delete was lost) only finishes the replacement.
func (r *Reconciler) rerun(ctx context.Context, vm, next *vmv1.VirtualMachine, pod *corev1.Pod) error {
	counting := !requestCounted(vm)
	if counting {
		next.Status.UserRestartCount++
		next.Status.LastRunRequest = vm.Spec.RunRequestedAt.DeepCopy()
		next.Status.Phase = vmv1.PhasePending
	}
	next.Status.PodUID = ""
	if err := r.letGo(ctx, vm, next); err != nil {
		return err
	}
	if counting {
		at := vm.Spec.RunRequestedAt.UTC().Format(time.RFC3339)
		if pod != nil && !podEnded(pod) {
			r.Recorder.Eventf(vm, pod, corev1.EventTypeNormal, "Restarted", "Restart", "Restarted %s(runRequestedAt %s): the guest powers down, then boots in a new runner pod (user restart %d)",
				by(vm, fieldRunRequestedAt), at, next.Status.UserRestartCount)
		} else {
			r.Recorder.Eventf(vm, nil, corev1.EventTypeNormal, "Started", "Start", "Started %s(runRequestedAt %s): a new run after the last one ended (runStrategy %s, user restart %d)",
				by(vm, fieldRunRequestedAt), at, vm.Spec.EffectiveRunStrategy(), next.Status.UserRestartCount)
		}
	}
	if pod == nil {
		return nil
	}
	return r.deleteOnPurpose(ctx, pod)
}

// letGo writes the status that lets go of the runner pod before it is deleted; vm then holds
// what the server holds, which the reconcile's final patch diffs against.
func (r *Reconciler) letGo(ctx context.Context, vm, next *vmv1.VirtualMachine) error {
	if err := statuspatch.Patch(ctx, r.Client, vm, next); err != nil {
		return r.fail("patch-status", client.IgnoreNotFound(err))
	}
	vm.Status = *next.Status.DeepCopy()
	return nil
}

// deleteOnPurpose deletes the pod with its grace period and marks the copy in hand deleting, so
// the rest of the reconcile reports it Stopping rather than what it was a moment ago.
func (r *Reconciler) deleteOnPurpose(ctx context.Context, pod *corev1.Pod) error {
	if err := r.deletePod(ctx, pod); err != nil {
		return r.fail("delete-pod", err)
	}
	if pod.DeletionTimestamp == nil {
		pod.DeletionTimestamp = &metav1.Time{Time: r.now()}
	}
	return nil
}

// adopt names pod in status as the current run's, and the run request it satisfies: the status
// write that did so when the pod was made was lost.
func adopt(next *vmv1.VirtualMachine, pod *corev1.Pod) {
	next.Status.PodUID = string(pod.UID)
	if t := podRequest(pod); !t.IsZero() && (next.Status.LastRunRequest == nil || t.After(next.Status.LastRunRequest.Time)) {
		next.Status.LastRunRequest = &metav1.Time{Time: t}
	}
}

// announcePower tells of a stop that completed and of a start out of Halted, once: only the
// reconcile whose guarded status write made the transition gets here with it.
func (r *Reconciler) announcePower(vm, next *vmv1.VirtualMachine, pod *corev1.Pod) {
	switch {
	case vm.Status.Phase != vmv1.PhaseStopped && next.Status.Phase == vmv1.PhaseStopped:
		r.Recorder.Eventf(vm, nil, corev1.EventTypeNormal, "Stopped", "Stop", "Stopped %s(runStrategy Halted)", by(vm, fieldRunStrategy))
	case wasHalted(&vm.Status) && !vm.Spec.Halted() && !wasHalted(&next.Status) && pod != nil && pod.DeletionTimestamp == nil:
		r.Recorder.Eventf(vm, pod, corev1.EventTypeNormal, "Started", "Start", "Started %s(runStrategy %s)", by(vm, fieldRunStrategy), vm.Spec.EffectiveRunStrategy())
	}
}

// guestGrace is the time the guest gets to power off (spec.terminationGracePeriodSeconds, which
// the CRD defaults); the pod's own grace period adds the runner's margin to stop the hypervisor.
func guestGrace(vm *vmv1.VirtualMachine) int64 {
	if g := vm.Spec.TerminationGracePeriodSeconds; g != nil {
		return *g
	}
	return corev1.DefaultTerminationGracePeriodSeconds
}

// by is "by MANAGER " for the field manager that last set spec.<field>, or "" when none is
// recorded; events read "Stopped by vmctl (runStrategy Halted)".
func by(vm *vmv1.VirtualMachine, field string) string {
	if who := requester(vm, field); who != "" {
		return "by " + who + " "
	}
	return ""
}

// requester names the field manager that last set spec.<field>, from the VM's managedFields:
// vmctl writes as manager vmctl, kubectl as kubectl-patch, kubectl-edit or
// kubectl-client-side-apply. Of several owners (a shared apply) the latest wins.
func requester(vm *vmv1.VirtualMachine, field string) string {
	var who string
	var at time.Time
	for _, e := range vm.ManagedFields {
		if e.Subresource != "" || e.FieldsV1 == nil || !owns(e.FieldsV1.Raw, "f:spec", "f:"+field) {
			continue
		}
		var t time.Time
		if e.Time != nil {
			t = e.Time.Time
		}
		if who == "" || t.After(at) {
			who, at = e.Manager, t
		}
	}
	return who
}

// owns says a managedFields fieldsV1 set holds the path.
func owns(raw []byte, path ...string) bool {
	var set map[string]json.RawMessage
	if json.Unmarshal(raw, &set) != nil {
		return false
	}
	for i, p := range path {
		sub, ok := set[p]
		if !ok {
			return false
		}
		if i == len(path)-1 {
			return true
		}
		set = nil
		if json.Unmarshal(sub, &set) != nil {
			return false
		}
	}
	return false
}
