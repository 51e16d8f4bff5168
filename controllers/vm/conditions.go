package vm

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/migratable"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// One setter per condition of a VirtualMachine, every one here. Each decides from what the
// reconcile's earlier steps gathered (the runner pod, why no new pod may start, the health of
// the pod's node, the nodes' fit, the resize plan, the migration verdict), called together by
// its status step, so the order of the steps cannot change what a condition says. Pure.

// cause is why something is not so: a condition's reason and message.
type cause struct{ reason, message string }

// facts are what Scheduled and Ready are decided from.
type facts struct {
	pod      *corev1.Pod // the runner pod; nil when there is none
	held     *cause      // why no new runner pod starts (there is none then)
	halted   *cause      // runStrategy Halted or spec.suspend: why there is no guest (haltedCause)
	stopping *cause      // why the runner pod is being deleted, when virtpod deleted it on purpose (stoppingCause)
	lost     *cause      // the pod's node is not ready or was deleted (nodeHealth)
	fit      string      // virtpod's account of the nodes, for a pod the scheduler cannot place (whyNot)
}

// setScheduled: whether the runner pod is on a node, and if not, why.
func setScheduled(st *vmv1.VirtualMachineStatus, generation int64, f facts) {
	c := metav1.Condition{Type: vmv1.ConditionScheduled, Status: metav1.ConditionFalse, ObservedGeneration: generation}
	why, none := noPod(st, f)
	switch {
	case none && f.held == nil && f.halted == nil && terminal(st.Phase):
		why = cause{vmv1.ReasonNoRunnerPod, "the guest has stopped and its runner pod is gone"}
	case !none:
		var bound bool
		if bound, why = placement(f.pod); bound {
			c.Status = metav1.ConditionTrue
		}
		if why.reason == vmv1.ReasonUnschedulable && f.fit != "" {
			why.message += "; virtpod: " + f.fit
		}
	}
	c.Reason, c.Message = why.reason, why.message
	meta.SetStatusCondition(&st.Conditions, c)
}

// setReady: whether the guest runs, and if not, why. A lost node comes before what the pod
// says, which is stale then: the guest may still run where nobody hears from it.
func setReady(st *vmv1.VirtualMachineStatus, generation int64, f facts) {
	c := metav1.Condition{Type: vmv1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: generation}
	why, none := noPod(st, f)
	switch pod := f.pod; {
	case none:
	case f.lost != nil:
		why = *f.lost
	case f.stopping != nil:
		why = *f.stopping
	case keptEnd(st, pod) || podEnded(pod) && pod.DeletionTimestamp == nil:
		why = cause{stoppedReason(st), stoppedMessage(st)}
	case pod.DeletionTimestamp != nil:
		why = cause{vmv1.ReasonStopping, "the guest is shutting down"}
	case pod.Spec.NodeName == "":
		_, why = placement(pod) // without virtpod's account, which Scheduled carries
	case isReady(pod) || guestStarted(pod) && podspec.GuestProbe(pod) == "":
		// Without a guest probe, the started guest is what Ready means, whether or not the
		// pod's readiness probe has run since.
		c.Status = metav1.ConditionTrue
		why = cause{vmv1.ReasonGuestRunning, "the guest is running"}
		if probe := podspec.GuestProbe(pod); probe != "" {
			why.message += " and passes its readiness probe (" + probe + ")"
		}
	case guestStarted(pod):
		// Only a pod whose guest has a readiness probe is started and not ready for long.
		why = cause{vmv1.ReasonGuestNotReady, fmt.Sprintf("the guest is running but has not passed its readiness probe (%s); "+
			"the runner pod's Unhealthy events give each failure: kubectl describe pod %s", podspec.GuestProbe(pod), pod.Name)}
	default:
		why.reason, why.message = startingReason(pod)
	}
	c.Reason, c.Message = why.reason, why.message
	meta.SetStatusCondition(&st.Conditions, c)
}

// noPod is what Scheduled and Ready say while there is no runner pod (false when there is): why
// none may start, runStrategy Halted, the stopped guest (Ready's words; Scheduled says its
// own), the restart back-off, or a pod on its way.
func noPod(st *vmv1.VirtualMachineStatus, f facts) (cause, bool) {
	switch {
	case f.pod != nil:
		return cause{}, false
	case f.halted != nil:
		return *f.halted, true
	case f.held != nil:
		return *f.held, true
	case terminal(st.Phase):
		return cause{stoppedReason(st), stoppedMessage(st)}, true
	case st.RestartCount > 0 && st.LastTermination != nil:
		return cause{vmv1.ReasonRestartBackoff, fmt.Sprintf("restart %d after %s (back-off %s): %s",
			st.RestartCount, st.LastTermination.Reason, restartDelay(st.RestartCount), st.LastTermination.Message)}, true
	default:
		return cause{vmv1.ReasonNoRunnerPod, "the runner pod is being created"}, true
	}
}

// placement is what the scheduler says of the pod: on a node, or why not yet.
func placement(pod *corev1.Pod) (bool, cause) {
	if pod.Spec.NodeName != "" {
		return true, cause{vmv1.ReasonScheduled, fmt.Sprintf("runner pod %s is on node %s", pod.Name, pod.Spec.NodeName)}
	}
	if c := podCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Message != "" {
		return false, cause{vmv1.ReasonUnschedulable, "runner pod cannot be scheduled: " + c.Message}
	}
	return false, cause{vmv1.ReasonWaitingForScheduler, "the runner pod waits for the scheduler"}
}

// unschedulable is a pod the scheduler has tried to place and could not: virtpod then adds its
// own account of the nodes (whyNot).
func unschedulable(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	_, why := placement(pod)
	return why.reason == vmv1.ReasonUnschedulable
}

// setImagesCurrent records the effective images and whether the runner pod uses them;
// recreating says the pod is being replaced to use them (imageUpdatePolicy Recreate), which the
// condition keeps saying until the old pod is gone.
func setImagesCurrent(st *vmv1.VirtualMachineStatus, generation int64, pod *corev1.Pod, want vmv1.Images, recreating bool) {
	st.Images = &want
	if pod == nil || podEnded(pod) {
		meta.RemoveStatusCondition(&st.Conditions, vmv1.ConditionImagesCurrent)
		return
	}
	c := metav1.Condition{Type: vmv1.ConditionImagesCurrent, Status: metav1.ConditionTrue, Reason: vmv1.ReasonCurrent,
		Message: "the runner pod uses the effective images", ObservedGeneration: generation}
	if have := podspec.PodImages(pod); have != want {
		c.Status = metav1.ConditionFalse
		switch old := meta.FindStatusCondition(st.Conditions, vmv1.ConditionImagesCurrent); {
		case recreating:
			c.Reason, c.Message = vmv1.ReasonRecreating, "replacing the runner pod: "+imagesDiff(have, want)
		case old != nil && old.Reason == vmv1.ReasonRecreating:
			return
		default:
			c.Reason = vmv1.ReasonRestartRequired
			c.Message = imagesDiff(have, want) + "; they apply at the guest's next start (imageUpdatePolicy Recreate applies them now)"
		}
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// setProviderAvailable: what the VM's ProviderClass allows (provider.go decides).
func setProviderAvailable(st *vmv1.VirtualMachineStatus, generation int64, v verdict) {
	c := metav1.Condition{Type: vmv1.ConditionProviderAvailable, Status: metav1.ConditionTrue,
		Reason: v.why.reason, Message: v.why.message, ObservedGeneration: generation}
	if v.blocked {
		c.Status = metav1.ConditionFalse
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// setSoftwareEmulation says plainly whether the guest is emulated.
func setSoftwareEmulation(st *vmv1.VirtualMachineStatus, vm *vmv1.VirtualMachine) {
	c := metav1.Condition{Type: vmv1.ConditionSoftwareEmulation, Status: metav1.ConditionFalse, Reason: vmv1.ReasonKVM,
		Message: "the guest runs with KVM", ObservedGeneration: vm.Generation}
	if vm.Spec.Acceleration == vmv1.AccelerationEmulated {
		c.Status, c.Reason = metav1.ConditionTrue, vmv1.ReasonEmulationRequested
		c.Message = "the guest runs under software emulation (QEMU TCG), many times slower than with KVM, because the VM asked for it"
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// startingReason explains a scheduled pod whose guest is not running yet, from the runner
// container's state: an image that cannot be pulled says so here.
func startingReason(pod *corev1.Pod) (string, string) {
	if cs := runnerpod.Status(pod); cs != nil {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			msg := w.Reason
			if w.Message != "" {
				msg += ": " + w.Message
			}
			return vmv1.ReasonStarting, "runner container is waiting: " + msg
		}
		if cs.State.Running != nil {
			return vmv1.ReasonGuestBooting, fmt.Sprintf("the runner is up and the guest is booting; the guest starts once the node agent "+
				"(virtpod-agent on node %s) has plumbed the pod network, so a VM that stays here waits for that agent: "+
				"kubectl -n virtpod-system get pods -l app.kubernetes.io/name=virtpod-agent --field-selector spec.nodeName=%s", pod.Spec.NodeName, pod.Spec.NodeName)
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
	msg += secretDisksHint(pod)
	return vmv1.ReasonStarting, msg
}

func cloudInitSecret(pod *corev1.Pod) *corev1.SecretVolumeSource {
	for _, v := range pod.Spec.Volumes {
		if v.Name == podspec.CloudInitVolume && v.Secret != nil {
			return v.Secret
		}
	}
	return nil
}

// haltedCause is what Scheduled and Ready say of a halted or suspended VM without a runner pod;
// nil when the VM is neither.
func haltedCause(vm *vmv1.VirtualMachine) *cause {
	switch {
	case vm.Spec.Halted():
		return &cause{vmv1.ReasonHalted, fmt.Sprintf("runStrategy is Halted: vmctl start %s starts it", vm.Name)}
	case vm.Spec.Suspend:
		return &cause{vmv1.ReasonSuspended, fmt.Sprintf("spec.suspend is true: no guest runs while it is (the Suspended condition says whether its state is saved); vmctl resume %s continues it", vm.Name)}
	}
	return nil
}

// haltingMessage is Ready's message while a halted VM's guest powers down; resumingSuffix ends
// it once the strategy changed back before the pod was gone.
const (
	haltingMessage = "runStrategy is Halted: powering the guest down"
	resumingSuffix = ": the guest starts again once its old runner pod is gone"
)

// stoppingCause says why the runner pod is going away, when virtpod let go of it on purpose:
// runStrategy Halted, a start while still stopping, a run request, or a replacement (a new
// image, a restart). nil otherwise: a pod deleted by someone else is only "shutting down".
// vm.Status is the status before this reconcile's setters.
func stoppingCause(vm *vmv1.VirtualMachine, pod *corev1.Pod) *cause {
	switch {
	case pod == nil:
		return nil
	case vm.Spec.Halted():
		return &cause{vmv1.ReasonStopping, haltingMessage}
	case pod.DeletionTimestamp == nil || vm.Status.PodUID == string(pod.UID):
		return nil
	case wasHalted(&vm.Status):
		return &cause{vmv1.ReasonStopping, fmt.Sprintf("runStrategy is %s again%s", vm.Spec.EffectiveRunStrategy(), resumingSuffix)}
	case vm.Status.LastRunRequest != nil && vm.Status.LastRunRequest.After(podRequest(pod)):
		return &cause{vmv1.ReasonStopping, fmt.Sprintf("restarting as asked at %s (runRequestedAt): the guest is shutting down, then it boots in a new runner pod",
			vm.Status.LastRunRequest.UTC().Format(time.RFC3339))}
	default:
		return &cause{vmv1.ReasonStopping, fmt.Sprintf("the guest is shutting down; runStrategy is %s, so a new runner pod starts once this one is gone", vm.Spec.EffectiveRunStrategy())}
	}
}

// wasHalted says the status describes a halted VM: Stopped, or powering down for Halted (and
// maybe already asked to start again).
func wasHalted(st *vmv1.VirtualMachineStatus) bool {
	if st.Phase == vmv1.PhaseStopped {
		return true
	}
	c := meta.FindStatusCondition(st.Conditions, vmv1.ConditionReady)
	return st.Phase == vmv1.PhaseStopping && c != nil && c.Reason == vmv1.ReasonStopping &&
		(c.Message == haltingMessage || strings.HasSuffix(c.Message, resumingSuffix))
}

func stoppedReason(st *vmv1.VirtualMachineStatus) string {
	if st.Phase == vmv1.PhaseFailed {
		return vmv1.ReasonRunnerFailed
	}
	return vmv1.ReasonGuestStopped
}

func stoppedMessage(st *vmv1.VirtualMachineStatus) string {
	if st.LastTermination == nil {
		return "the guest has stopped"
	}
	return describe(st.LastTermination)
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

// setDisksReady: whether what the VM's disks name is there; the condition is only on VMs that
// name claims, ConfigMaps or Secrets, and is removed when they no longer do.
func setDisksReady(st *vmv1.VirtualMachineStatus, generation int64, d diskFacts) {
	if !d.named {
		meta.RemoveStatusCondition(&st.Conditions, vmv1.ConditionDisksReady)
		return
	}
	c := metav1.Condition{Type: vmv1.ConditionDisksReady, Status: metav1.ConditionTrue, ObservedGeneration: generation,
		Reason: vmv1.ReasonDisksReady, Message: d.summary}
	if d.held != nil {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, d.held.reason, d.held.message
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// setResized: where the running guest's resize stands (from resize's plan), with status.guest;
// both are removed while no guest runs. p is nil then.
func setResized(st *vmv1.VirtualMachineStatus, generation int64, p *resizePlan) {
	if p == nil {
		st.Guest = nil
		meta.RemoveStatusCondition(&st.Conditions, vmv1.ConditionResized)
		return
	}
	st.Guest = &vmv1.GuestStatus{CPUs: p.guest.cpus, Memory: p.guest.memory}
	if !p.show {
		meta.RemoveStatusCondition(&st.Conditions, vmv1.ConditionResized)
		return
	}
	c := metav1.Condition{Type: vmv1.ConditionResized, Status: metav1.ConditionFalse, ObservedGeneration: generation,
		Reason: p.condition.reason, Message: p.condition.message}
	if p.done {
		c.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// setMigratable: whether the running guest can be live-migrated, and if not why (v, from
// migratable.Check); removed while no guest runs (v nil).
func setMigratable(st *vmv1.VirtualMachineStatus, generation int64, v *migratable.Verdict) {
	if v == nil {
		meta.RemoveStatusCondition(&st.Conditions, vmv1.ConditionMigratable)
		return
	}
	c := metav1.Condition{Type: vmv1.ConditionMigratable, Status: metav1.ConditionFalse, ObservedGeneration: generation,
		Reason: v.Reason, Message: v.Message}
	if v.OK() {
		c.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, c)
}
