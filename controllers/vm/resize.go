package vm

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// Live resize (docs/api.md#live-resize). The runner pod requests what the guest has; a change
// of spec.guest.cpus or memory on a running guest goes in two steps whose order keeps the pod's
// resources at least what the guest uses at every moment:
//
//   - grow: the pod first (pods/resize), then — once the kubelet has resized it — the guest,
//     by the desired-* annotations the node agent acts on;
//   - shrink: the guest first, then the pod, once the agent reports (guest-* annotations) that
//     the guest gave the CPUs and memory back.
//
// Every step is a patch made from what the pod says now, and the pod's next event (the
// kubelet's resize conditions, the agent's annotations) brings the next: nothing polls.

// +kubebuilder:rbac:groups="",resources=pods/resize,verbs=patch

// size is a guest's CPUs and memory.
type size struct {
	cpus   int32
	memory resource.Quantity
}

func (s size) equal(o size) bool { return s.cpus == o.cpus && s.memory.Cmp(o.memory) == 0 }

func (s size) String() string {
	return fmt.Sprintf("%d CPUs and %s memory", s.cpus, s.memory.String())
}

func specSize(vm *vmv1.VirtualMachine) size {
	return size{vm.Spec.Guest.CPUs, vm.Spec.Guest.Memory}
}

// bootSize is the size the runner booted the guest with: its --cpus and --memory-mib (zero
// when its arguments do not read).
func bootSize(pod *corev1.Pod) size {
	c, err := runnerpod.Config(pod)
	if err != nil {
		return size{}
	}
	return size{c.CPUs, *resource.NewQuantity(c.MemoryMiB<<20, resource.BinarySI)}
}

// annotatedSize reads a size from two pod annotations; ok is false when neither is there. A
// missing or unreadable one keeps fallback's.
func annotatedSize(pod *corev1.Pod, cpusKey, memKey string, fallback size) (size, bool) {
	s := fallback
	c, okC := pod.Annotations[cpusKey]
	m, okM := pod.Annotations[memKey]
	if n, err := strconv.ParseInt(c, 10, 32); okC && err == nil {
		s.cpus = int32(n)
	}
	if q, err := resource.ParseQuantity(m); okM && err == nil {
		s.memory = q
	}
	return s, okC || okM
}

// guestSize is what the guest has: the agent's report, else what it booted with.
func guestSize(pod *corev1.Pod) size {
	s, _ := annotatedSize(pod, vmv1.AnnotationGuestCPUs, vmv1.AnnotationGuestMemory, bootSize(pod))
	return s
}

// resizePlan is what one reconcile does about the guest's size, decided from the VM and its pod
// alone (planResize), and what the Resized condition and status.guest then say.
type resizePlan struct {
	guest size
	// podResources, when set, is what the runner pod is resized to (pods/resize).
	podResources *corev1.ResourceRequirements
	// desired, when set, is written into the desired-* annotations for the agent.
	desired *size
	// show: this pod's guest has been or is being resized, so the VM carries Resized.
	show      bool
	condition cause
	done      bool
}

// planResize decides the next step of a running guest's resize. opts are the pod options the
// controller builds the VM's pods with.
func planResize(vm *vmv1.VirtualMachine, pod *corev1.Pod, opts podspec.Options) resizePlan {
	want, boot := specSize(vm), bootSize(pod)
	guest := guestSize(pod)
	asked, annotated := annotatedSize(pod, vmv1.AnnotationDesiredCPUs, vmv1.AnnotationDesiredMemory, boot)
	_, reported := annotatedSize(pod, vmv1.AnnotationGuestCPUs, vmv1.AnnotationGuestMemory, boot)
	p := resizePlan{guest: guest}
	if want.equal(boot) && !annotated && !reported {
		return p // never resized: nothing to do, nothing to write
	}
	p.show = true

	// The pod covers the larger of what the guest has and what it is to have: grown before
	// the guest grows, shrunk after it has shrunk.
	cover := size{max(want.cpus, guest.cpus), want.memory}
	if guest.memory.Cmp(cover.memory) > 0 {
		cover.memory = guest.memory
	}
	podWant := podspec.Resources(vm, opts, cover.cpus, cover.memory)
	podHave := podspec.RunnerResources(pod)
	settled := sameSize(podHave, podWant)
	if !settled {
		p.podResources = &podWant
	}
	pending := podCondition(pod, corev1.PodResizePending)
	inProgress := podCondition(pod, corev1.PodResizeInProgress)
	kubeletDone := settled && pod.Status.ObservedGeneration >= pod.Generation && pending == nil && inProgress == nil

	// The guest is asked to shrink at once, and to grow only into a pod the kubelet resized.
	desired := want
	if !kubeletDone {
		desired.cpus = min(want.cpus, guest.cpus)
		if want.memory.Cmp(guest.memory) > 0 {
			desired.memory = guest.memory
		}
	}
	if !desired.equal(asked) {
		p.desired = &desired
	}

	failure := pod.Annotations[vmv1.AnnotationResizeError]
	switch {
	case pending != nil && pending.Reason == corev1.PodReasonInfeasible:
		p.condition = cause{vmv1.ReasonResizeInfeasible, fmt.Sprintf("node %s cannot fit the runner pod for %s: %s; the guest keeps %s",
			pod.Spec.NodeName, want, pending.Message, guest)}
	case pending != nil && pending.Reason == corev1.PodReasonDeferred:
		p.condition = cause{vmv1.ReasonResizeDeferred, fmt.Sprintf("node %s cannot fit the runner pod for %s now: %s; the guest keeps %s until it can",
			pod.Spec.NodeName, want, pending.Message, guest)}
	case failure != "" && !guest.equal(asked):
		p.condition = cause{vmv1.ReasonGuestResizeFailed, fmt.Sprintf("the runner did not resize the guest to %s: %s; the guest has %s",
			asked, failure, guest)}
	case guest.equal(want) && kubeletDone:
		p.done = true
		p.condition = cause{vmv1.ReasonResized, fmt.Sprintf("the guest has %s, as asked", guest)}
	case guest.equal(want):
		p.condition = cause{vmv1.ReasonResizeInProgress, fmt.Sprintf("the guest has %s; its runner pod %s is being resized to fit", guest, pod.Name)}
	case !kubeletDone:
		msg := fmt.Sprintf("resizing runner pod %s in place for %s (the guest has %s)", pod.Name, want, guest)
		if inProgress != nil && inProgress.Message != "" {
			msg += ": " + inProgress.Message
		}
		p.condition = cause{vmv1.ReasonResizeInProgress, msg}
	default:
		p.condition = cause{vmv1.ReasonResizeInProgress, fmt.Sprintf("resizing the guest from %s to %s", guest, desired)}
	}
	return p
}

// sameSize compares the CPU and memory of two containers' resources, the part a resize changes.
func sameSize(a, b corev1.ResourceRequirements) bool {
	for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		for _, l := range [][2]corev1.ResourceList{{a.Requests, b.Requests}, {a.Limits, b.Limits}} {
			x, okX := l[0][n]
			y, okY := l[1][n]
			if okX != okY || x.Cmp(y) != 0 {
				return false
			}
		}
	}
	return true
}

// resize takes the plan's steps on a running guest's pod: the pod's resize, then the
// annotations for the agent. It returns the plan, for the condition and status.guest.
func (r *Reconciler) resize(ctx context.Context, vm *vmv1.VirtualMachine, pod *corev1.Pod, opts podspec.Options) (resizePlan, error) {
	p := planResize(vm, pod, opts)
	if p.podResources != nil {
		patched := pod.DeepCopy()
		if c := runnerpod.Container(patched); c != nil {
			c.Resources = *p.podResources
		}
		if err := r.Client.SubResource("resize").Patch(ctx, patched, client.StrategicMergeFrom(pod)); apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			// The API server will not resize this pod (its node's kubelet does not resize in
			// place, say): retrying cannot help; the condition says why and a change of the
			// VM or the pod brings us back. The guest is not grown.
			p.condition = cause{vmv1.ReasonResizeInfeasible, fmt.Sprintf("the API server refused to resize runner pod %s in place: %s; the guest keeps %s",
				pod.Name, trim(err.Error()), p.guest)}
			p.done, p.podResources, p.desired = false, nil, nil
			r.Recorder.Eventf(vm, pod, corev1.EventTypeWarning, "ResizePodFailed", "ResizePod", "Could not resize runner pod %s: %v", pod.Name, err)
			return p, nil
		} else if err != nil {
			return p, r.fail("resize-pod", err)
		}
		req := p.podResources.Requests
		r.Recorder.Eventf(vm, pod, corev1.EventTypeNormal, "ResizingPod", "ResizePod", "Resizing runner pod %s in place to %s CPU and %s memory for %s",
			pod.Name, req.Cpu(), req.Memory(), specSize(vm))
	}
	if p.desired != nil {
		patched := pod.DeepCopy()
		metav1.SetMetaDataAnnotation(&patched.ObjectMeta, vmv1.AnnotationDesiredCPUs, strconv.Itoa(int(p.desired.cpus)))
		metav1.SetMetaDataAnnotation(&patched.ObjectMeta, vmv1.AnnotationDesiredMemory, p.desired.memory.String())
		if err := r.Client.Patch(ctx, patched, client.MergeFrom(pod)); err != nil {
			return p, r.fail("resize-guest", err)
		}
		r.Recorder.Eventf(vm, pod, corev1.EventTypeNormal, "ResizingGuest", "ResizeGuest", "Asking the guest for %s (it has %s)", *p.desired, p.guest)
	}
	return p, nil
}

// frozenResize is a migrating guest's plan: its size as it is and Resized as it was, since the
// target is a copy of this pod at its size now.
func frozenResize(vm *vmv1.VirtualMachine, pod *corev1.Pod) *resizePlan {
	p := &resizePlan{guest: guestSize(pod)}
	if c := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionResized); c != nil {
		p.show, p.done, p.condition = true, c.Status == metav1.ConditionTrue, cause{c.Reason, c.Message}
	}
	return p
}

// announceResize tells of a resize's end, or of a refusal, once: when the status write made
// the transition.
func (r *Reconciler) announceResize(vm, next *vmv1.VirtualMachine, pod *corev1.Pod) {
	now := meta.FindStatusCondition(next.Status.Conditions, vmv1.ConditionResized)
	if now == nil || pod == nil {
		return
	}
	if was := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionResized); was != nil && was.Reason == now.Reason && was.Message == now.Message {
		return
	}
	switch now.Reason {
	case vmv1.ReasonResized:
		r.Recorder.Eventf(vm, pod, corev1.EventTypeNormal, vmv1.ReasonResized, "Resize", "%s", now.Message)
	case vmv1.ReasonResizeInfeasible, vmv1.ReasonResizeDeferred, vmv1.ReasonGuestResizeFailed:
		r.Recorder.Eventf(vm, pod, corev1.EventTypeWarning, now.Reason, "Resize", "%s", now.Message)
	}
}
