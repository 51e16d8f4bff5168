package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/statuspatch"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// What the user asks of the guest's power: runStrategy Halted stops it, a run request
// (spec.runRequestedAt) restarts it or starts an ended run again. Both act like the restart
// policy does: status first, guarded by the VM's resourceVersion, then the pod's delete, so a
// controller killed in between neither loses the request nor counts it twice.

// Spec fields whose field manager the events name.
const (
	fieldRunStrategy    = "runStrategy"
	fieldRunRequestedAt = "runRequestedAt"
	fieldSuspend        = "suspend"
)

// reconcilePower applies the run strategy and run requests to the runner pod: restart.go
// decides (runStateOf and the actions), the methods below act. done ends the reconcile here,
// without a status write: the cache has not seen the pod the status names yet.
func (r *Reconciler) reconcilePower(ctx context.Context, s *scope) (done bool, err error) {
	var moving bool // a migration target may hold the guest: no restart until it is switched to or gone
	if s.pod == nil || podEnded(s.pod) {
		if moving, err = r.migrationTarget(ctx, s.vm); err != nil {
			return false, err
		}
	}
	hold := s.disks.held // a claim's or ConfigMap's event brings us back
	if s.prov.blocked {
		hold = &s.prov.why
	}
	switch runStateOf(s.vm, s.pod, moving, hold != nil) {
	case runDeleting:
		switch {
		case s.vm.Spec.Halted() && runnerEnded(s.pod):
			s.next.Status.LastTermination = termination(s.pod, r.now()) // how the guest took the power-down
		case keptEnd(&s.vm.Status, s.pod) && !terminal(s.vm.Status.Phase):
			// The run ended while its pod is deleted (PodGC fails a Terminating pod, then
			// removes it): observe makes the phase terminal, and the end is recorded with it.
			s.next.Status.LastTermination = termination(s.pod, r.now())
		}
	case runEnded:
		if err := r.podEnded(ctx, s); err != nil {
			return false, err
		}
		if s.next.Status.PodUID == "" && s.pod.DeletionTimestamp == nil { // restarting: the pod is gone
			s.pod = nil
		}
	case runBehind:
		// Its ended or deleted event brings us back; nothing is written from this view. Unless
		// the server agrees with it: then the pod was made for this run from a VM cache that had
		// not yet seen the restart counted, and is this run's, labelled with the earlier one.
		if stale, err := r.madeFromStaleView(ctx, s.vm, s.pod); err != nil || !stale {
			return true, err
		}
		if err := r.relabelRun(ctx, s.vm, s.pod); err != nil {
			return false, err
		}
		return false, r.keepRunning(ctx, s)
	case runLive:
		return false, r.keepRunning(ctx, s)
	case runMissing:
		// Gone without ending (deleted, evicted, node lost), or a cache that has not seen it
		// yet: only the server can tell.
		if gone, err := r.podGone(ctx, s.vm); err != nil || !gone {
			return true, err
		}
		return false, r.podVanished(ctx, s)
	case runHeld:
		s.held = hold // shown on Scheduled and Ready
	case runSuspended:
		// No guest starts while spec.suspend is true; the Suspended condition says whether a
		// state is saved.
	case runNoPod:
		return false, r.start(ctx, s)
	}
	return false, nil
}

// start makes the runner pod, counting a run request that starts an ended run first. A pod the
// API server refuses holds the VM (a change of the VM brings us back).
func (r *Reconciler) start(ctx context.Context, s *scope) error {
	if rerunRequested(s.vm) || discardRequested(s.vm) {
		if err := r.rerun(ctx, s); err != nil {
			return err
		}
	}
	var refused *podRefused
	var err error
	if s.result, s.pod, err = r.startPod(ctx, s.vm, s.next, s.opts); errors.As(err, &refused) {
		s.held = refused.cause()
		return nil
	}
	if err == nil && s.pod != nil && podspec.ResumedFrom(s.pod) {
		r.Recorder.Eventf(s.vm, s.pod, corev1.EventTypeNormal, "Resuming", "Resume", "Resuming the guest %sin runner pod %s from the state saved on claim %s at %s",
			by(s.vm, fieldSuspend), s.pod.Name, s.vm.Status.SuspendedState.ClaimName, s.vm.Status.SuspendedState.SavedAt.UTC().Format(time.RFC3339))
	}
	return err
}

// keepRunning keeps a running pod named in status and its labels the VM's, then acts on
// liveAction.
func (r *Reconciler) keepRunning(ctx context.Context, s *scope) error {
	if s.next.Status.PodUID != string(s.pod.UID) {
		if ok, err := r.adoptable(ctx, s.pod); err != nil || !ok {
			return err
		}
		adopt(s.next, s.pod) // ours, but the status write that named it was lost
	}
	if err := r.syncLabels(ctx, s.vm, s.pod); err != nil {
		return r.fail("sync-labels", err)
	}
	r.resumed(s)
	if !s.vm.Spec.Suspend {
		if err := r.withdrawSuspend(ctx, s.pod); err != nil {
			return err
		}
	}
	switch liveAction(s.vm, s.pod, s.images) {
	case actStop:
		return r.stop(ctx, s)
	case actSuspend:
		return r.askSuspend(ctx, s)
	case actRerun:
		return r.rerun(ctx, s)
	case actRecreate:
		return r.recreate(ctx, s)
	}
	return nil
}

// podEnded records how the runner ended, then acts on endedAction.
func (r *Reconciler) podEnded(ctx context.Context, s *scope) error {
	vm, next, pod := s.vm, s.next, s.pod
	if string(pod.UID) != vm.Status.PodUID {
		if counted(pod, vm) {
			// Already counted (status written, delete lost): finish the restart.
			return r.fail("delete-pod", r.deletePod(ctx, pod))
		}
		// This run's pod, ended before the status write that named it was made (it was lost):
		// its end is still to be counted, and kept under runStrategy Once.
		if ok, err := r.adoptable(ctx, pod); err != nil || !ok {
			return err
		}
		adopt(next, pod)
	}
	term := termination(pod, r.now())
	next.Status.LastTermination = term
	switch endedAction(vm, pod) {
	case actSuspended:
		return r.recordSuspended(ctx, s)
	case actStop:
		return r.stop(ctx, s)
	case actRestart:
		return r.restart(ctx, s, describe(term))
	case actRerun:
		return r.rerun(ctx, s)
	}
	return nil // the Stopped or Failed event follows the status write (announceEnd)
}

// podVanished acts on vanishedAction for the pod status named, gone without ending.
func (r *Reconciler) podVanished(ctx context.Context, s *scope) error {
	act := vanishedAction(s.vm)
	if act == actLetGo {
		s.next.Status.PodUID = ""
		return nil
	}
	s.next.Status.LastTermination = &vmv1.Termination{
		ExitCode: -1, Reason: "RunnerPodDeleted",
		Message:    fmt.Sprintf("runner pod %s was deleted while the guest ran", runnerPodName(s.vm)),
		FinishedAt: nowTime(r.now()),
	}
	if act == actFail {
		s.next.Status.PodUID = ""
		s.next.Status.Phase = vmv1.PhaseFailed // written, and announced, by Reconcile
		return nil
	}
	return r.restart(ctx, s, s.next.Status.LastTermination.Message)
}

// restart counts the restart in status first, guarded by the VM's resourceVersion so a stale
// reconcile cannot count it twice, then deletes the ended pod; the delete event starts the next.
func (r *Reconciler) restart(ctx context.Context, s *scope, why string) error {
	vm, next, pod := s.vm, s.next, s.pod
	next.Status.RestartCount++
	next.Status.PodUID = ""
	next.Status.Phase = vmv1.PhasePending
	if err := statuspatch.Patch(ctx, r.Client, vm, next); err != nil {
		return r.fail("count-restart", err)
	}
	r.Metrics.restarted()
	var related runtime.Object // a nil *Pod in the interface would panic in the recorder
	if pod != nil {
		related = pod
	}
	r.Recorder.Eventf(vm, related, corev1.EventTypeNormal, "Restarting", "Restart", "Restarting guest (restart %d, runStrategy %s): %s", next.Status.RestartCount, vm.Spec.EffectiveRunStrategy(), why)
	// What the server now holds; the final patch and the announcements compare against it. A
	// copy: the setters may change next's conditions in place.
	vm.Status = *next.Status.DeepCopy()
	if pod == nil {
		return nil
	}
	return r.fail("delete-pod", r.deletePod(ctx, pod))
}

// recreate replaces a running pod whose images are no longer the VM's effective ones, for a VM
// that opted in with imageUpdatePolicy Recreate. Status first, guarded like a restart, then the
// delete: the guest gets its clean shutdown and the pod's delete event starts the new one.
func (r *Reconciler) recreate(ctx context.Context, s *scope) error {
	vm, next, pod, want := s.vm, s.next, s.pod, s.images
	if pod.DeletionTimestamp != nil {
		return nil
	}
	next.Status.PodUID = ""
	setImagesCurrent(&next.Status, vm.Generation, pod, want, true)
	if err := statuspatch.Patch(ctx, r.Client, vm, next); err != nil {
		return r.fail("patch-status", client.IgnoreNotFound(err))
	}
	vm.Status = *next.Status.DeepCopy()
	r.Recorder.Eventf(vm, pod, corev1.EventTypeNormal, "ImagesChanged", "RecreatePod", "Recreating runner pod %s (imageUpdatePolicy Recreate): %s", pod.Name, imagesDiff(podspec.PodImages(pod), want))
	return r.fail("delete-pod", r.deletePod(ctx, pod))
}

// stop powers the guest down for runStrategy Halted. Status first: the pod is let go of
// (status.podUID cleared), so its disappearance is a stop, not a failure, even if the strategy
// changes again before it is gone. Then the delete, with the pod's grace period, which the
// runner spends on the guest's ACPI power-down; virtpod never forces it.
func (r *Reconciler) stop(ctx context.Context, s *scope) error {
	vm, pod := s.vm, s.pod
	s.next.Status.PodUID = ""
	if err := r.letGo(ctx, s); err != nil {
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
// ended run's pod removed. s.pod is nil when the ended run's pod is gone already. A request
// counted before (the delete was lost) only finishes the replacement.
func (r *Reconciler) rerun(ctx context.Context, s *scope) error {
	vm, next, pod := s.vm, s.next, s.pod
	counting := !requestCounted(vm)
	discarded := discardRequested(vm)
	if counting {
		next.Status.UserRestartCount++
		next.Status.LastRunRequest = vm.Spec.RunRequestedAt.DeepCopy()
		next.Status.Phase = vmv1.PhasePending
	}
	if discarded {
		next.Status.SuspendedState = nil // the new run boots afresh; the next suspend overwrites the file
	}
	next.Status.PodUID = ""
	if err := r.letGo(ctx, s); err != nil {
		return err
	}
	if discarded {
		r.Metrics.suspendTransition("discarded")
		r.Recorder.Eventf(vm, nil, corev1.EventTypeNormal, "StateDiscarded", "Start", "Discarded the guest's saved state %s(runRequestedAt later than the suspend): the guest boots afresh",
			by(vm, fieldRunRequestedAt))
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
func (r *Reconciler) letGo(ctx context.Context, s *scope) error {
	if err := statuspatch.Patch(ctx, r.Client, s.vm, s.next); err != nil {
		return r.fail("patch-status", client.IgnoreNotFound(err))
	}
	s.vm.Status = *s.next.Status.DeepCopy()
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

// announceEnd tells of a guest that stopped for good, once: only the reconcile whose
// resourceVersion-guarded status write recorded the end gets here with the transition.
func (r *Reconciler) announceEnd(vm, next *vmv1.VirtualMachine, pod *corev1.Pod) {
	if terminal(vm.Status.Phase) || !terminal(next.Status.Phase) {
		return
	}
	var related runtime.Object // a nil *Pod in the interface would panic in the recorder
	if pod != nil {
		related = pod
	}
	if next.Status.Phase == vmv1.PhaseFailed {
		r.Recorder.Eventf(vm, related, corev1.EventTypeWarning, "Failed", "Stop", "Guest failed and runStrategy is %s: %s", vm.Spec.EffectiveRunStrategy(), describe(next.Status.LastTermination))
		return
	}
	r.Recorder.Eventf(vm, related, corev1.EventTypeNormal, "Stopped", "Stop", "Guest powered off and runStrategy is %s", vm.Spec.EffectiveRunStrategy())
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
