package vm

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// Condition reasons. Each says what is going on in words a user can act on.
const (
	ReasonNoRunnerPod         = "NoRunnerPod"
	ReasonRestartBackoff      = "RestartBackoff"
	ReasonWaitingForScheduler = "WaitingForScheduler"
	ReasonUnschedulable       = "Unschedulable"
	ReasonScheduled           = "Scheduled"
	ReasonStarting            = "Starting"
	ReasonGuestBooting        = "GuestBooting"
	ReasonGuestRunning        = "GuestRunning"
	ReasonStopping            = "Stopping"
	ReasonGuestStopped        = "GuestStopped"
	ReasonRunnerFailed        = "RunnerFailed"
	ReasonPodNameTaken        = "PodNameTaken"
	ReasonCurrent             = "Current"
	ReasonRestartRequired     = "RestartRequired"
	ReasonRecreating          = "Recreating"
	ReasonRunnerPodInvalid    = "RunnerPodInvalid"
)

// observe derives the VM's status from its runner pod (nil when there is none).
func observe(st *vmv1.VirtualMachineStatus, generation int64, pod *corev1.Pod) {
	st.ObservedGeneration = generation
	scheduled := metav1.Condition{Type: vmv1.ConditionScheduled, ObservedGeneration: generation}
	ready := metav1.Condition{Type: vmv1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: generation}

	if pod == nil {
		st.Node, st.PodIP = "", ""
		scheduled.Status = metav1.ConditionFalse
		switch {
		case terminal(st.Phase):
			scheduled.Reason, scheduled.Message = ReasonNoRunnerPod, "the guest has stopped and its runner pod is gone"
			ready.Reason, ready.Message = stoppedReason(st), stoppedMessage(st)
		case st.RestartCount > 0 && st.LastTermination != nil:
			st.Phase = vmv1.PhasePending
			wait := restartDelay(st.RestartCount)
			scheduled.Reason = ReasonRestartBackoff
			scheduled.Message = fmt.Sprintf("restart %d after %s (back-off %s): %s", st.RestartCount, st.LastTermination.Reason, wait, st.LastTermination.Message)
			ready.Reason, ready.Message = ReasonRestartBackoff, scheduled.Message
		default:
			st.Phase = vmv1.PhasePending
			scheduled.Reason, scheduled.Message = ReasonNoRunnerPod, "the runner pod is being created"
			ready.Reason, ready.Message = ReasonNoRunnerPod, "the runner pod is being created"
		}
		setConditions(st, scheduled, ready)
		return
	}

	st.PodName = pod.Name
	st.Node = pod.Spec.NodeName
	st.PodIP = pod.Status.PodIP
	if pod.Spec.NodeName == "" {
		scheduled.Status = metav1.ConditionFalse
		scheduled.Reason, scheduled.Message = ReasonWaitingForScheduler, "the runner pod waits for the scheduler"
		if c := podCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Message != "" {
			scheduled.Reason = ReasonUnschedulable
			scheduled.Message = "runner pod cannot be scheduled: " + c.Message
		}
	} else {
		scheduled.Status = metav1.ConditionTrue
		scheduled.Reason = ReasonScheduled
		scheduled.Message = fmt.Sprintf("runner pod %s is on node %s", pod.Name, pod.Spec.NodeName)
	}

	switch {
	case pod.DeletionTimestamp != nil:
		st.Phase = vmv1.PhaseStopping
		ready.Reason, ready.Message = ReasonStopping, "the guest is shutting down"
	case podEnded(pod):
		if st.PodUID == string(pod.UID) { // kept because the policy does not restart it
			if pod.Status.Phase == corev1.PodFailed {
				st.Phase = vmv1.PhaseFailed
			} else {
				st.Phase = vmv1.PhaseSucceeded
			}
		}
		ready.Reason, ready.Message = stoppedReason(st), stoppedMessage(st)
	case pod.Spec.NodeName == "":
		st.Phase = vmv1.PhaseScheduling
		ready.Reason, ready.Message = scheduled.Reason, scheduled.Message
	case isReady(pod):
		st.Phase = vmv1.PhaseRunning
		ready.Status = metav1.ConditionTrue
		ready.Reason, ready.Message = ReasonGuestRunning, "the guest is running"
	default:
		st.Phase = vmv1.PhaseStarting
		ready.Reason, ready.Message = startingReason(pod)
	}
	setConditions(st, scheduled, ready)
}

// imagesCurrent records the effective images and whether the runner pod uses them.
func imagesCurrent(st *vmv1.VirtualMachineStatus, vm *vmv1.VirtualMachine, pod *corev1.Pod, want vmv1.Images) {
	st.Images = &want
	if pod == nil || podEnded(pod) {
		meta.RemoveStatusCondition(&st.Conditions, vmv1.ConditionImagesCurrent)
		return
	}
	c := metav1.Condition{Type: vmv1.ConditionImagesCurrent, Status: metav1.ConditionTrue, Reason: ReasonCurrent,
		Message: "the runner pod uses the effective images", ObservedGeneration: vm.Generation}
	if have := podspec.PodImages(pod); have != want {
		c.Status = metav1.ConditionFalse
		if old := meta.FindStatusCondition(st.Conditions, vmv1.ConditionImagesCurrent); old != nil && old.Reason == ReasonRecreating {
			return // keep saying so until the old pod is gone
		}
		c.Reason = ReasonRestartRequired
		c.Message = imagesDiff(have, want) + "; they apply at the guest's next start (imageUpdatePolicy Recreate applies them now)"
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

func imagesDiff(have, want vmv1.Images) string {
	var parts []string
	for _, d := range [][3]string{{"runner", have.Runner, want.Runner}, {"kernel", have.Kernel, want.Kernel}, {"rootDisk", have.RootDisk, want.RootDisk}} {
		if d[1] != d[2] {
			parts = append(parts, fmt.Sprintf("%s %s → %s", d[0], d[1], d[2]))
		}
	}
	return strings.Join(parts, ", ")
}

func setConditions(st *vmv1.VirtualMachineStatus, cs ...metav1.Condition) {
	for _, c := range cs {
		meta.SetStatusCondition(&st.Conditions, c)
	}
}

// startingReason explains a scheduled pod whose guest is not running yet, from the runner
// container's state: an image that cannot be pulled says so here.
func startingReason(pod *corev1.Pod) (string, string) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != podspec.RunnerContainer {
			continue
		}
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			msg := w.Reason
			if w.Message != "" {
				msg += ": " + w.Message
			}
			return ReasonStarting, "runner container is waiting: " + msg
		}
		if cs.State.Running != nil {
			return ReasonGuestBooting, "the runner is up and the guest is booting"
		}
	}
	msg := fmt.Sprintf("runner pod is starting on node %s", pod.Spec.NodeName)
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReadyToStartContainers && c.Status == corev1.ConditionFalse && c.Message != "" {
			msg = c.Message
		}
	}
	if s := cloudInitSecret(pod); s != nil {
		// A Secret or key that is not there leaves the pod here (ContainerCreating, "no pod
		// sandbox exists") with nothing more in its status: only the kubelet's FailedMount event
		// says why, and virtpod reads neither events nor Secrets. So name what the pod waits for.
		keys := make([]string, len(s.Items))
		for i, it := range s.Items {
			keys[i] = it.Key
		}
		msg += fmt.Sprintf("; the pod mounts cloud-init Secret %q (keys %s): if that Secret or a key is missing, the pod's FailedMount event says so",
			s.SecretName, strings.Join(keys, ", "))
	}
	return ReasonStarting, msg
}

func cloudInitSecret(pod *corev1.Pod) *corev1.SecretVolumeSource {
	for _, v := range pod.Spec.Volumes {
		if v.Name == podspec.CloudInitVolume && v.Secret != nil {
			return v.Secret
		}
	}
	return nil
}

func stoppedReason(st *vmv1.VirtualMachineStatus) string {
	if st.Phase == vmv1.PhaseFailed {
		return ReasonRunnerFailed
	}
	return ReasonGuestStopped
}

func stoppedMessage(st *vmv1.VirtualMachineStatus) string {
	if st.LastTermination == nil {
		return "the guest has stopped"
	}
	return describe(st.LastTermination)
}

// termination reads how the runner container ended; its termination message carries the cause.
func termination(pod *corev1.Pod, now time.Time) *vmv1.Termination {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == podspec.RunnerContainer && cs.State.Terminated != nil {
			t := cs.State.Terminated
			finished := t.FinishedAt
			if finished.IsZero() {
				finished = nowTime(now)
			}
			return &vmv1.Termination{ExitCode: t.ExitCode, Reason: t.Reason, Message: trim(t.Message), FinishedAt: finished}
		}
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

func podEnded(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func isReady(pod *corev1.Pod) bool {
	c := podCondition(pod, corev1.PodReady)
	return pod.Status.Phase == corev1.PodRunning && c != nil && c.Status == corev1.ConditionTrue
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func terminal(p vmv1.Phase) bool { return p == vmv1.PhaseSucceeded || p == vmv1.PhaseFailed }

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

// stopped is a VM whose guest ended and stays stopped under its restart policy.
func stopped(vm *vmv1.VirtualMachine) bool {
	return terminal(vm.Status.Phase) && !restarts(vm.Spec.RestartPolicy, vm.Status.Phase == vmv1.PhaseFailed)
}

// restartDelay is the back-off before restart n: the first restart is immediate, then 10 s
// doubling to 5 minutes, so a crash-looping guest cannot storm the cluster with pods.
func restartDelay(n int32) time.Duration {
	if n <= 1 {
		return 0
	}
	d := 10 * time.Second
	for i := int32(2); i < n && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// restartWait is how long the VM must still wait before its next runner pod starts.
func restartWait(vm *vmv1.VirtualMachine, now time.Time) time.Duration {
	t := vm.Status.LastTermination
	if vm.Status.RestartCount == 0 || t == nil {
		return 0
	}
	return t.FinishedAt.Add(restartDelay(vm.Status.RestartCount)).Sub(now)
}

func nowTime(now time.Time) metav1.Time { return metav1.NewTime(now.Truncate(time.Second)) }
