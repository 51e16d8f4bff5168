package vm

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// The run strategy: whether an ended guest starts again, after what back-off, which ended runner
// pod is still to be counted, and when a run request replaces a run. Pure; the reconciler acts
// on these answers.

// AnnotationRestartCount on a runner pod is the VM's restartCount when the pod was made: the
// run it belongs to.
const AnnotationRestartCount = "vm.virtpod.io/restart-count"

// AnnotationRunRequest on a runner pod is the run request (spec.runRequestedAt, RFC 3339) its
// run satisfies: a later request replaces the run, and a pod made before a counted request is
// an earlier run's.
const AnnotationRunRequest = "vm.virtpod.io/run-request"

// Back-off: the first restart is immediate, then firstBackoff doubling up to maxBackoff.
const (
	firstBackoff = 10 * time.Second
	maxBackoff   = 5 * time.Minute
)

// restarts says whether the controller starts a new run by itself after a run ended (failed or
// not).
func restarts(s vmv1.RunStrategy, failed bool) bool {
	switch s {
	case vmv1.RunOnce, vmv1.RunManual, vmv1.RunHalted:
		return false
	case vmv1.RunRerunOnFailure:
		return failed
	default: // Always, and unset (the CRD defaults Always)
		return true
	}
}

// terminal is a phase the guest stays in until a restart.
func terminal(p vmv1.Phase) bool { return p == vmv1.PhaseSucceeded || p == vmv1.PhaseFailed }

// stopped is a VM whose guest ended and stays stopped under its run strategy (until a run
// request).
func stopped(vm *vmv1.VirtualMachine) bool {
	return terminal(vm.Status.Phase) && !restarts(vm.Spec.RunStrategy, vm.Status.Phase == vmv1.PhaseFailed)
}

// restartDelay is the back-off before restart n, so a crash-looping guest cannot storm the
// cluster with pods.
func restartDelay(n int32) time.Duration {
	if n <= 1 {
		return 0
	}
	d := firstBackoff
	for i := int32(2); i < n && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// restartWait is how long the VM must still wait before its next runner pod starts, measured
// from the end of the previous run. Only a restart the controller decided (phase Pending after
// a run ended or vanished) waits: a run the user asked for (a run request made since that end,
// counted or not, or a start from Stopped) and a pod replaced on purpose (phase Stopping) do
// not.
func restartWait(vm *vmv1.VirtualMachine, now time.Time) time.Duration {
	t := vm.Status.LastTermination
	if vm.Status.RestartCount == 0 || t == nil || vm.Status.Phase != vmv1.PhasePending {
		return 0
	}
	if req := satisfiedRequest(vm); req != nil && !req.Before(&t.FinishedAt) {
		return 0
	}
	return t.FinishedAt.Add(restartDelay(vm.Status.RestartCount)).Sub(now)
}

// counted says whether the end of an ended runner pod other than the one in status is already
// counted: the pod belongs to an earlier run (the status write counted it, the delete was
// lost), by crash restarts or by a counted run request. A pod of the current run ended before
// the status write that named it was made; its end is still to be counted.
func counted(pod *corev1.Pod, vm *vmv1.VirtualMachine) bool {
	if pod.Annotations[AnnotationRestartCount] != strconv.Itoa(int(vm.Status.RestartCount)) {
		return true
	}
	last := vm.Status.LastRunRequest
	return last != nil && last.After(podRequest(pod))
}

// earlierRun says a pod not named in status was made for an earlier run than the VM's: its
// restart was counted, which only happens once the pod ended or went. Seen live, it is a pod
// cache behind the server, and adopting it would undo the restart (status naming a pod that
// has ended, the restart's back-off skipped). Pods from before the annotation are not judged.
func earlierRun(vm *vmv1.VirtualMachine, pod *corev1.Pod) bool {
	n, ok := pod.Annotations[AnnotationRestartCount]
	return ok && string(pod.UID) != vm.Status.PodUID && n != strconv.Itoa(int(vm.Status.RestartCount))
}

// podRequest is the run request a runner pod was made for; zero when none.
func podRequest(pod *corev1.Pod) time.Time {
	t, _ := time.Parse(time.RFC3339, pod.Annotations[AnnotationRunRequest])
	return t
}

// satisfiedRequest is the run request a runner pod made now satisfies: the later of the spec's
// runRequestedAt and the last counted one. A request made before the run starts is met by it,
// uncounted (a VM created with one, or asked to start while it waits to restart).
func satisfiedRequest(vm *vmv1.VirtualMachine) *metav1.Time {
	req, last := vm.Spec.RunRequestedAt, vm.Status.LastRunRequest
	if req == nil || last != nil && !req.After(last.Time) {
		return last.DeepCopy()
	}
	return req.DeepCopy()
}

// replaceRequested says a run request asks to replace pod's run: runRequestedAt is later than
// the request the pod was made for. Halted wins over any request.
func replaceRequested(vm *vmv1.VirtualMachine, pod *corev1.Pod) bool {
	req := vm.Spec.RunRequestedAt
	return req != nil && !vm.Spec.Halted() && req.After(podRequest(pod))
}

// requestCounted says the spec's run request (if any) was acted on: it is no later than
// status.lastRunRequest.
func requestCounted(vm *vmv1.VirtualMachine) bool {
	req, last := vm.Spec.RunRequestedAt, vm.Status.LastRunRequest
	return req == nil || last != nil && !req.After(last.Time)
}

// rerunRequested is an ended run, its pod gone, that a new run request starts again.
func rerunRequested(vm *vmv1.VirtualMachine) bool {
	return stopped(vm) && !vm.Spec.Halted() && !requestCounted(vm)
}

// runState is where the VM's run stands as this reconcile finds it: it picks what the power step
// (power.go, reconcilePower) does.
type runState int

const (
	runDeleting  runState = iota // the runner pod is being deleted: its delete event brings us back
	runMoving                    // a migration's source ended or vanished: the migration controller switches the VM to the target or deletes it
	runEnded                     // the runner pod ended: endedAction
	runLive                      // the runner pod runs or starts: liveAction
	runBehind                    // a pod of a run already counted, seen live: the cache is behind the server
	runMissing                   // the pod status names is not in the cache: gone (vanishedAction), or not seen yet
	runHalted                    // runStrategy Halted and no pod: none until the strategy changes
	runSuspended                 // spec.suspend and no pod: none until it is false
	runHeld                      // no pod, and none may start (the provider or the disks say why)
	runNoPod                     // no pod: start one, after the back-off
)

// runStateOf decides the run's state from the runner pod (nil when there is none), whether a
// migration target may hold the guest (moving) and whether a new pod is held back (held).
func runStateOf(vm *vmv1.VirtualMachine, pod *corev1.Pod, moving, held bool) runState {
	switch {
	case pod != nil && pod.DeletionTimestamp != nil:
		return runDeleting
	case moving && (pod != nil || vm.Status.PodUID != ""):
		return runMoving
	case pod != nil && podEnded(pod):
		return runEnded
	case pod != nil && earlierRun(vm, pod):
		return runBehind
	case pod != nil:
		return runLive
	case vm.Status.PodUID != "":
		return runMissing
	case vm.Spec.Halted():
		return runHalted
	case vm.Spec.Suspend:
		return runSuspended
	case held:
		return runHeld
	default:
		return runNoPod
	}
}

// action is what the power step does to a run (power.go has one method for each).
type action int

const (
	actKeep      action = iota // nothing: the run stays as it is
	actStop                    // runStrategy Halted: power the guest down (stop)
	actRestart                 // the run strategy starts the ended run again (restart)
	actRerun                   // a run request replaces the run (rerun)
	actRecreate                // new images under imageUpdatePolicy Recreate (recreate)
	actLetGo                   // forget a vanished pod whose run had ended or was halted
	actFail                    // a vanished pod is the run's failure, kept by the run strategy
	actSuspend                 // spec.suspend: ask the node agent to save the guest (askSuspend)
	actSuspended               // the runner saved its guest and ended: record the state (recordSuspended)
)

// endedAction applies the run strategy to an ended run: a suspend's end recorded, a new run,
// the pod removed (Halted), a new run on request, or the end kept (the Stopped or Failed event
// follows the status write).
func endedAction(vm *vmv1.VirtualMachine, pod *corev1.Pod) action {
	switch {
	case suspendedEnd(pod) && vm.Spec.Guest.StateClaim != nil:
		return actSuspended // whatever the spec says now: a saved guest is never thrown away
	case vm.Spec.Halted():
		return actStop
	case restarts(vm.Spec.RunStrategy, pod.Status.Phase == corev1.PodFailed):
		return actRestart
	case replaceRequested(vm, pod):
		return actRerun
	}
	return actKeep
}

// liveAction is what happens to a pod that runs or starts: stopped for Halted, left alone while
// a live migration moves its guest (controllers/migration; its end brings this pod's update
// event), suspended for spec.suspend, replaced on a run request, or recreated for images it
// does not use yet.
func liveAction(vm *vmv1.VirtualMachine, pod *corev1.Pod, images vmv1.Images) action {
	switch {
	case vm.Spec.Halted():
		return actStop
	case migrating(pod):
		return actKeep
	case vm.Spec.Suspend:
		return actSuspend
	case replaceRequested(vm, pod):
		return actRerun
	case podspec.PodImages(pod) != images && vm.Spec.ImageUpdatePolicy == vmv1.ImageUpdateRecreate:
		return actRecreate
	}
	return actKeep
}

// vanishedAction treats a pod that disappeared while running as a failure, restarted or kept
// per the run strategy; an ended run's pod removed, or a halted VM's, is only let go of.
func vanishedAction(vm *vmv1.VirtualMachine) action {
	switch {
	case stopped(vm) || vm.Spec.Halted():
		return actLetGo
	case restarts(vm.Spec.RunStrategy, true):
		return actRestart
	}
	return actFail
}
