package vm

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// The restart policy: whether an ended guest starts again, after what back-off, and which
// ended runner pod is still to be counted. Pure; the reconciler acts on these answers.

// AnnotationRestartCount on a runner pod is the VM's restartCount when the pod was made: the
// run it belongs to.
const AnnotationRestartCount = "vm.virtpod.io/restart-count"

// Back-off: the first restart is immediate, then firstBackoff doubling up to maxBackoff.
const (
	firstBackoff = 10 * time.Second
	maxBackoff   = 5 * time.Minute
)

// restarts says whether a runner that ended (failed or not) is started again.
func restarts(policy vmv1.RestartPolicy, failed bool) bool {
	switch policy {
	case vmv1.RestartNever:
		return false
	case vmv1.RestartOnFailure:
		return failed
	default:
		return true
	}
}

// terminal is a phase the guest stays in until a restart.
func terminal(p vmv1.Phase) bool { return p == vmv1.PhaseSucceeded || p == vmv1.PhaseFailed }

// stopped is a VM whose guest ended and stays stopped under its restart policy.
func stopped(vm *vmv1.VirtualMachine) bool {
	return terminal(vm.Status.Phase) && !restarts(vm.Spec.RestartPolicy, vm.Status.Phase == vmv1.PhaseFailed)
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
// from the end of the previous run.
func restartWait(vm *vmv1.VirtualMachine, now time.Time) time.Duration {
	t := vm.Status.LastTermination
	if vm.Status.RestartCount == 0 || t == nil {
		return 0
	}
	return t.FinishedAt.Add(restartDelay(vm.Status.RestartCount)).Sub(now)
}

// counted says whether the end of an ended runner pod other than the one in status is already
// counted: the pod belongs to an earlier run (the status write counted it, the delete was
// lost). A pod of the current run ended before the status write that named it was made; its
// end is still to be counted.
func counted(pod *corev1.Pod, vm *vmv1.VirtualMachine) bool {
	return pod.Annotations[AnnotationRestartCount] != strconv.Itoa(int(vm.Status.RestartCount))
}
