package vm

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// observe records which runner pod the status describes (nil when there is none), where it
// runs and the VM's phase; the conditions are set from the same pod by the setters
// (conditions.go). A halted VM is Stopping while it has a pod and Stopped once it has none.
func observe(st *vmv1.VirtualMachineStatus, generation int64, pod *corev1.Pod, halted, suspend bool) {
	st.ObservedGeneration = generation
	parked := suspend && st.SuspendedState != nil && st.PodUID == "" // the pod, if any, is the one that saved it
	if pod == nil || parked {
		st.Node, st.PodIP = "", ""
		switch {
		case halted:
			st.Phase = vmv1.PhaseStopped
		case parked:
			st.Phase = vmv1.PhaseSuspended
		case !terminal(st.Phase):
			st.Phase = vmv1.PhasePending
		}
		return
	}
	st.PodName = pod.Name
	st.Node = pod.Spec.NodeName
	st.PodIP = pod.Status.PodIP
	switch {
	case keptEnd(st, pod) && !halted: // kept because the run strategy does not restart it, even as it is removed
		if pod.Status.Phase == corev1.PodFailed {
			st.Phase = vmv1.PhaseFailed
		} else {
			st.Phase = vmv1.PhaseSucceeded
		}
	case pod.DeletionTimestamp != nil || halted:
		st.Phase = vmv1.PhaseStopping
	case podEnded(pod): // an earlier run's, being let go of: the phase stays what the restart made it
	case pod.Spec.NodeName == "":
		st.Phase = vmv1.PhaseScheduling
	case isReady(pod) || guestStarted(pod):
		st.Phase = vmv1.PhaseRunning
	default:
		st.Phase = vmv1.PhaseStarting
	}
}

// termination reads how the runner container ended; its termination message carries the cause.
func termination(pod *corev1.Pod, now time.Time) *vmv1.Termination {
	if t := runnerpod.Terminated(pod); t != nil {
		finished := t.FinishedAt
		if finished.IsZero() {
			finished = nowTime(now)
		}
		return &vmv1.Termination{ExitCode: t.ExitCode, Reason: t.Reason, Message: trim(t.Message), FinishedAt: finished}
	}
	t := &vmv1.Termination{ExitCode: -1, Reason: pod.Status.Reason, Message: trim(pod.Status.Message), FinishedAt: nowTime(now)}
	// A pod failed from outside, with its runner never seen to end (PodGC after its node was
	// deleted, an eviction), says why in its DisruptionTarget condition.
	if c := podCondition(pod, corev1.DisruptionTarget); t.Reason == "" && c != nil && c.Status == corev1.ConditionTrue {
		t.Reason, t.Message = c.Reason, trim(c.Message)
	}
	if t.Reason == "" {
		t.Reason = string(pod.Status.Phase)
	}
	if pod.Status.Phase == corev1.PodSucceeded {
		t.ExitCode = 0
	}
	return t
}

func describe(t *vmv1.Termination) string {
	if t == nil {
		return "the runner ended"
	}
	s := fmt.Sprintf("runner exited with code %d", t.ExitCode)
	if t.Reason != "" {
		s += " (" + t.Reason + ")"
	}
	if t.Message != "" {
		s += ": " + t.Message
	}
	return s
}

// trim keeps status small: a termination message can be 4 KiB of log tail.
func trim(s string) string {
	const max = 1024
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// keptEnd is the current run's ended pod, which status still names: the run strategy keeps its
// end.
func keptEnd(st *vmv1.VirtualMachineStatus, pod *corev1.Pod) bool {
	return podEnded(pod) && st.PodUID == string(pod.UID)
}

// runnerEnded says the runner container has ended, as the kubelet reports before it removes a
// deleted pod.
func runnerEnded(pod *corev1.Pod) bool { return runnerpod.Terminated(pod) != nil }

func podEnded(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func isReady(pod *corev1.Pod) bool {
	c := podCondition(pod, corev1.PodReady)
	return pod.Status.Phase == corev1.PodRunning && c != nil && c.Status == corev1.ConditionTrue
}

// guestStarted says the guest runs, whether or not it passes its readiness probe yet: the node
// agent saw it start (its guest-started annotation, as the runner reports it), or the runner's
// startup probe passed, up to a second later (the kubelet probes on ticks). A pod without a
// startup probe (made by an older controller) is started as soon as its container runs, which
// says nothing of the guest: there, Ready decides.
func guestStarted(pod *corev1.Pod) bool {
	if pod.Annotations[vmv1.AnnotationGuestStarted] != "" {
		return true
	}
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	if c := runnerpod.Container(pod); c == nil || c.StartupProbe == nil {
		return false
	}
	cs := runnerpod.Status(pod)
	return cs != nil && cs.State.Running != nil && cs.Started != nil && *cs.Started
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func nowTime(now time.Time) metav1.Time { return metav1.NewTime(now.Truncate(time.Second)) }
