package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// Suspend and resume (docs/api.md#suspend-and-resume): spec.suspend asks the running pod's node
// agent to save the guest (AnnotationSuspend); the runner ends with MessageSuspended, and its
// end is recorded as status.suspendedState, the pod removed. With spec.suspend false again the
// next runner pod resumes from the state (podspec.Resumes), and once its guest runs the state
// is consumed (the runner removed it). A run request later than the state discards it.

// suspendedEnd says the runner ended by saving its guest.
func suspendedEnd(pod *corev1.Pod) bool {
	t := runnerpod.Terminated(pod)
	return t != nil && t.ExitCode == 0 && strings.HasPrefix(t.Message, vmv1.MessageSuspended)
}

// discardRequested says a run request (runRequestedAt) later than the saved state, not yet
// counted, asks for a fresh boot instead of a resume.
func discardRequested(vm *vmv1.VirtualMachine) bool {
	st, req := vm.Status.SuspendedState, vm.Spec.RunRequestedAt
	return st != nil && req != nil && req.After(st.SavedAt.Time) && !requestCounted(vm)
}

// askSuspend marks a running pod for its node agent to suspend the guest, once its guest runs
// and only when the pod can (it mounts the state claim); the condition says why not otherwise.
func (r *Reconciler) askSuspend(ctx context.Context, s *scope) error {
	pod := s.pod
	if pod.Annotations[vmv1.AnnotationSuspend] != "" || !podspec.CanSuspend(pod) || !guestStarted(pod) || hotplugUnsettled(s.next) != "" {
		return nil
	}
	if err := r.annotateSuspend(ctx, pod, "true"); err != nil {
		return r.fail("ask-suspend", err)
	}
	r.Recorder.Eventf(s.vm, pod, corev1.EventTypeNormal, "Suspending", "Suspend", "Suspending the guest %s(spec.suspend): runner pod %s saves its state to claim %s",
		by(s.vm, fieldSuspend), pod.Name, s.vm.Spec.Guest.StateClaim.ClaimName)
	return nil
}

// withdrawSuspend takes back a suspend request spec.suspend no longer makes: the node agent
// then does not start one (one under way completes, and the guest resumes from it).
func (r *Reconciler) withdrawSuspend(ctx context.Context, pod *corev1.Pod) error {
	if _, asked := pod.Annotations[vmv1.AnnotationSuspend]; !asked {
		return nil
	}
	return r.fail("withdraw-suspend", r.annotateSuspend(ctx, pod, nil))
}

// annotateSuspend sets (or, with nil, removes) the suspend request and clears the agent's last
// error with it: a new request starts clean.
func (r *Reconciler) annotateSuspend(ctx context.Context, pod *corev1.Pod, v any) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		vmv1.AnnotationSuspend: v, vmv1.AnnotationSuspendError: nil}}})
	return r.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch))
}

// recordSuspended writes the saved state into status, letting go of the ended pod, then deletes
// it: status first, so a controller killed in between neither loses the state nor restarts the
// guest from scratch.
func (r *Reconciler) recordSuspended(ctx context.Context, s *scope) error {
	vm, next, pod := s.vm, s.next, s.pod
	next.Status.SuspendedState = &vmv1.SuspendedState{
		ClaimName: vm.Spec.Guest.StateClaim.ClaimName,
		SavedAt:   next.Status.LastTermination.FinishedAt,
		PodName:   pod.Name,
		Node:      pod.Spec.NodeName,
	}
	next.Status.PodUID = ""
	next.Status.Phase = vmv1.PhaseSuspended
	if err := r.letGo(ctx, s); err != nil {
		return err
	}
	r.Metrics.suspendTransition("saved")
	r.Recorder.Eventf(vm, pod, corev1.EventTypeNormal, "Suspended", "Suspend", "Suspended: the guest's state is saved on claim %s; runner pod %s is removed",
		next.Status.SuspendedState.ClaimName, pod.Name)
	return r.deleteOnPurpose(ctx, pod)
}

// resumed consumes the saved state once the pod that resumed from it runs its guest (the
// runner removed the state file before it let the guest run).
func (r *Reconciler) resumed(s *scope) {
	if s.next.Status.SuspendedState != nil && podspec.ResumedFrom(s.pod) && guestStarted(s.pod) && s.next.Status.PodUID == string(s.pod.UID) {
		s.next.Status.SuspendedState = nil
	}
}

// suspendView is what the Suspended condition is decided from.
type suspendView struct {
	asked bool                 // spec.suspend
	saved *vmv1.SuspendedState // the saved state, as this reconcile leaves status
	claim string               // spec.guest.stateClaim's claim; "" without one
	pod   *corev1.Pod          // the runner pod; nil when none
	last  *vmv1.Termination    // how the last runner ended
	disks string               // hotplugUnsettled's answer: a disk attaching or detaching
}

func suspendViewOf(vm, next *vmv1.VirtualMachine, pod *corev1.Pod) suspendView {
	v := suspendView{asked: vm.Spec.Suspend, saved: next.Status.SuspendedState, pod: pod, last: next.Status.LastTermination, disks: hotplugUnsettled(next)}
	if c := vm.Spec.Guest.StateClaim; c != nil {
		v.claim = c.ClaimName
	}
	return v
}

// setSuspended sets or clears the Suspended condition: True while a state is saved and no
// guest runs; False while a suspend or a resume is under way or cannot be done; absent when
// neither is asked for nor saved.
func setSuspended(st *vmv1.VirtualMachineStatus, gen int64, v suspendView) {
	status, reason, msg := suspendCondition(v)
	if reason == "" {
		meta.RemoveStatusCondition(&st.Conditions, vmv1.ConditionSuspended)
		return
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: vmv1.ConditionSuspended, Status: status, ObservedGeneration: gen, Reason: reason, Message: msg})
}

func suspendCondition(v suspendView) (metav1.ConditionStatus, string, string) {
	live := v.pod != nil && !podEnded(v.pod) && v.pod.DeletionTimestamp == nil
	if s := v.saved; s != nil {
		saved := fmt.Sprintf("the guest's state is saved on claim %s (runner pod %s on node %s, %s)", s.ClaimName, s.PodName, s.Node, s.SavedAt.UTC().Format("2006-01-02T15:04:05Z"))
		failed := v.last != nil && v.last.ExitCode != 0 && v.last.FinishedAt.After(s.SavedAt.Time)
		switch {
		case failed:
			return metav1.ConditionFalse, vmv1.ReasonResumeFailed, fmt.Sprintf("%s; the last runner could not resume from it: %s; the state is kept and the next start tries again; a new runner image that loads it, or a run request (vmctl restart) that discards it and boots afresh, ends this",
				saved, describe(v.last))
		case live && podspec.ResumedFrom(v.pod):
			return metav1.ConditionFalse, vmv1.ReasonResuming, fmt.Sprintf("runner pod %s is loading the state saved on claim %s; the guest continues where it stopped", v.pod.Name, s.ClaimName)
		case v.asked:
			return metav1.ConditionTrue, vmv1.ReasonSuspended, saved + "; no runner pod holds CPU or memory; set spec.suspend false (vmctl resume) to continue it"
		}
		return metav1.ConditionTrue, vmv1.ReasonSuspended, saved + "; the guest resumes from it at its next start"
	}
	switch {
	case !v.asked:
		return "", "", ""
	case !live:
		return metav1.ConditionFalse, vmv1.ReasonNotSuspendable, "spec.suspend is true, but no guest runs and no state is saved: nothing to suspend, and no guest starts while it is true; set spec.suspend false to start it"
	case !podspec.CanSuspend(v.pod):
		fix := "restart the VM (vmctl restart) so its next runner pod mounts spec.guest.stateClaim"
		if v.claim == "" {
			fix = "set spec.guest.stateClaim, then restart the VM"
		}
		return metav1.ConditionFalse, vmv1.ReasonNotSuspendable, fmt.Sprintf("runner pod %s was started without a state claim (a start before spec.guest.stateClaim was set, or a live migration's target): %s; the guest runs on", v.pod.Name, fix)
	case v.pod.Annotations[vmv1.AnnotationSuspend] == "" && v.disks != "":
		return metav1.ConditionFalse, vmv1.ReasonSuspending, fmt.Sprintf("waiting for %s: a resumed guest must find its disks where they were; the guest is saved once they are done", v.disks)
	case v.pod.Annotations[vmv1.AnnotationSuspendError] != "":
		return metav1.ConditionFalse, vmv1.ReasonSuspendFailed, fmt.Sprintf("runner pod %s could not save the guest: %s; the guest runs on and its node agent tries again; set spec.suspend false to give up",
			v.pod.Name, trim(v.pod.Annotations[vmv1.AnnotationSuspendError]))
	}
	return metav1.ConditionFalse, vmv1.ReasonSuspending, fmt.Sprintf("runner pod %s is saving the guest's state to claim %s", v.pod.Name, v.claim)
}

// announceSuspend tells of a resume's end and of a suspend's or a resume's failure, once: only
// the reconcile whose guarded status write made the transition gets here with it. (A suspend's
// end is told by recordSuspended, whose own write makes it.)
func (r *Reconciler) announceSuspend(vm, next *vmv1.VirtualMachine, pod *corev1.Pod) {
	before, after := vm.Status.SuspendedState, next.Status.SuspendedState
	if before != nil && after == nil && pod != nil && podspec.ResumedFrom(pod) && guestStarted(pod) {
		r.Metrics.suspendTransition("resumed")
		r.Recorder.Eventf(vm, pod, corev1.EventTypeNormal, "Resumed", "Resume", "Resumed: the guest continues in runner pod %s from the state saved at %s", pod.Name, before.SavedAt.UTC().Format("2006-01-02T15:04:05Z"))
	}
	was, now := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionSuspended), meta.FindStatusCondition(next.Status.Conditions, vmv1.ConditionSuspended)
	if now != nil && (now.Reason == vmv1.ReasonResumeFailed || now.Reason == vmv1.ReasonSuspendFailed) && (was == nil || was.Reason != now.Reason) {
		var related runtime.Object // a nil *Pod in the interface would panic in the recorder
		if pod != nil {
			related = pod
		}
		r.Recorder.Eventf(vm, related, corev1.EventTypeWarning, now.Reason, "Suspend", "%s", now.Message)
	}
}

// hotplugUnsettled names a hotpluggable disk of the guest that is attaching or detaching (""
// when none is): a guest is saved only with its disks settled, since its resumed pod holds every
// hotpluggable disk of the spec on the slot status.disks gives it.
func hotplugUnsettled(vm *vmv1.VirtualMachine) string {
	for _, d := range vm.Status.Disks {
		if d.State != vmv1.DiskAttached {
			return fmt.Sprintf("disk %s (%s)", d.Name, d.State)
		}
	}
	return ""
}
