package vm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// started: the runner runs and its guest has booted (startup probe passed), and the kubelet
// has seen the pod's latest spec. Written from the pod itself, as the kubelet does.
func started(t *testing.T, pod *corev1.Pod, conds ...corev1.PodCondition) {
	t.Helper()
	eventually(t, "kubelet status written", func() error {
		p := &corev1.Pod{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
			return err
		}
		was := p.Status.ContainerStatuses
		running(&p.Status)
		p.Status.ContainerStatuses[0].Started = ptr.To(true)
		p.Status.ObservedGeneration = p.Generation
		// The resources the runner runs with: the spec's once resized, else what it had. A
		// kubelet that reports them is one that resizes in place (the API server checks).
		p.Status.ContainerStatuses[0].Resources = ptr.To(podspec.RunnerResources(p))
		if len(conds) > 0 && len(was) > 0 && was[0].Resources != nil {
			p.Status.ContainerStatuses[0].Resources = was[0].Resources
		}
		p.Status.Conditions = append(p.Status.Conditions, conds...)
		return env.Client.Status().Update(context.Background(), p)
	})
}

// agentReports writes the guest size as the node agent does after the runner's answer.
func agentReports(t *testing.T, pod *corev1.Pod, cpus int32, memory, failure string) {
	t.Helper()
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
		t.Fatal(err)
	}
	patched := p.DeepCopy()
	metav1.SetMetaDataAnnotation(&patched.ObjectMeta, vmv1.AnnotationGuestCPUs, fmt.Sprint(cpus))
	metav1.SetMetaDataAnnotation(&patched.ObjectMeta, vmv1.AnnotationGuestMemory, memory)
	delete(patched.Annotations, vmv1.AnnotationResizeError)
	if failure != "" {
		patched.Annotations[vmv1.AnnotationResizeError] = failure
	}
	if err := env.Client.Patch(context.Background(), patched, client.MergeFrom(p)); err != nil {
		t.Fatal(err)
	}
}

// podSized waits until the runner pod asks for what a guest of cpus and memory needs, and the
// agent is asked for desired (nil: nothing asked yet).
func podSized(t *testing.T, vm *vmv1.VirtualMachine, cpus int32, memory string, desired []string) *corev1.Pod {
	t.Helper()
	want := podspec.Resources(getVM(t, vm), podspec.DefaultOptions(), cpus, resource.MustParse(memory))
	var pod *corev1.Pod
	eventually(t, fmt.Sprintf("pod sized for %d CPUs, %s; agent asked for %v", cpus, memory, desired), func() error {
		p, err := runnerPod(vm)
		if err != nil {
			return err
		}
		have := podspec.RunnerResources(p)
		if have.Requests.Cpu().Cmp(*want.Requests.Cpu()) != 0 || have.Requests.Memory().Cmp(*want.Requests.Memory()) != 0 ||
			have.Limits.Memory().Cmp(*want.Limits.Memory()) != 0 {
			return fmt.Errorf("pod resources %v, want %v", have, want)
		}
		c, okC := p.Annotations[vmv1.AnnotationDesiredCPUs]
		m, okM := p.Annotations[vmv1.AnnotationDesiredMemory]
		if desired == nil && (okC || okM) {
			return fmt.Errorf("the guest was asked for %s/%s before the pod was resized", c, m)
		}
		if desired != nil && (c != desired[0] || m != desired[1]) {
			return fmt.Errorf("desired annotations %q/%q, want %v", c, m, desired)
		}
		pod = p
		return nil
	})
	return pod
}

// resizedIs waits for the Resized condition and status.guest.
func resizedIs(t *testing.T, vm *vmv1.VirtualMachine, status metav1.ConditionStatus, reason, contains string, cpus int32, memory string) {
	t.Helper()
	eventually(t, fmt.Sprintf("Resized %s/%s, guest %d/%s", status, reason, cpus, memory), func() error {
		st := getVM(t, vm).Status
		c := meta.FindStatusCondition(st.Conditions, vmv1.ConditionResized)
		if c == nil || c.Status != status || c.Reason != reason || !containsStr(c.Message, contains) {
			return fmt.Errorf("Resized is %+v", c)
		}
		if st.Guest == nil || st.Guest.CPUs != cpus || st.Guest.Memory.Cmp(resource.MustParse(memory)) != 0 {
			return fmt.Errorf("status.guest is %+v", st.Guest)
		}
		return nil
	})
}

func containsStr(s, sub string) bool { return strings.Contains(s, sub) }

func resizableVM(ns, name string) *vmv1.VirtualMachine {
	vm := kubeapi.SampleVM(ns, name)
	vm.Spec.Guest.MaxCPUs = ptr.To[int32](4)
	vm.Spec.Guest.MaxMemory = ptr.To(resource.MustParse("1Gi"))
	return vm
}

func resizeSpec(t *testing.T, vm *vmv1.VirtualMachine, cpus int32, memory string) {
	t.Helper()
	reconciled(t, vm, func(v *vmv1.VirtualMachine) {
		v.Spec.Guest.CPUs, v.Spec.Guest.Memory = cpus, resource.MustParse(memory)
	})
}

// TestLiveResize plays a grow, a shrink, a node that cannot fit and a guest that refuses,
// with the kubelet's and the agent's parts written as they write them.
func TestLiveResize(t *testing.T) {
	ns := namespace(t)
	vm := create(t, resizableVM(ns, "resize"))
	pod := waitPod(t, vm, "")
	bind(t, pod, "node-resize")
	started(t, pod)
	got := condition(t, vm, vmv1.PhaseRunning, vmv1.ConditionReady, metav1.ConditionTrue, vmv1.ReasonGuestRunning)
	if g := got.Status.Guest; g == nil || g.CPUs != 1 || g.Memory.Cmp(resource.MustParse("256Mi")) != 0 {
		t.Fatalf("status.guest of a booted guest: %+v", g)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionResized); c != nil {
		t.Fatalf("Resized on a VM never resized: %+v", c)
	}

	// Grow: the pod first; the guest is not asked while the kubelet has not resized the pod.
	resizeSpec(t, vm, 3, "768Mi")
	pod = podSized(t, vm, 3, "768Mi", nil)
	resizedIs(t, vm, metav1.ConditionFalse, vmv1.ReasonResizeInProgress, "resizing runner pod", 1, "256Mi")
	started(t, pod, corev1.PodCondition{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonDeferred,
		Message: "Node didn't have enough resource: cpu, requested: 3100, capacity: 2000"})
	resizedIs(t, vm, metav1.ConditionFalse, vmv1.ReasonResizeDeferred, "requested: 3100", 1, "256Mi")
	waitEvent(t, vm, "ResizeDeferred")
	podSized(t, vm, 3, "768Mi", nil)
	// The kubelet resized the pod: now the guest is asked, and the agent's report ends it.
	started(t, pod)
	pod = podSized(t, vm, 3, "768Mi", []string{"3", "768Mi"})
	agentReports(t, pod, 3, "768Mi", "")
	resizedIs(t, vm, metav1.ConditionTrue, vmv1.ReasonResized, "has 3 CPUs and 768Mi", 3, "768Mi")
	waitEvent(t, vm, "Resized")

	// Shrink: the guest first, the pod keeps what the guest has until it reports less.
	resizeSpec(t, vm, 1, "256Mi")
	pod = podSized(t, vm, 3, "768Mi", []string{"1", "256Mi"})
	resizedIs(t, vm, metav1.ConditionFalse, vmv1.ReasonResizeInProgress, "resizing the guest", 3, "768Mi")
	// A guest that gives back only part of its memory: the runner's words, and the pod keeps it.
	agentReports(t, pod, 1, "512Mi", "memory: the guest gave back 256Mi of 512Mi within 30s")
	resizedIs(t, vm, metav1.ConditionFalse, vmv1.ReasonGuestResizeFailed, "gave back 256Mi", 1, "512Mi")
	pod = podSized(t, vm, 1, "512Mi", []string{"1", "256Mi"})
	agentReports(t, pod, 1, "256Mi", "")
	pod = podSized(t, vm, 1, "256Mi", []string{"1", "256Mi"})
	resizedIs(t, vm, metav1.ConditionFalse, vmv1.ReasonResizeInProgress, "being resized to fit", 1, "256Mi")
	started(t, pod)
	resizedIs(t, vm, metav1.ConditionTrue, vmv1.ReasonResized, "has 1 CPUs and 256Mi", 1, "256Mi")

	// A node that can never fit the pod: the kubelet's reason, and the guest is not grown.
	resizeSpec(t, vm, 4, "256Mi")
	pod = podSized(t, vm, 4, "256Mi", []string{"1", "256Mi"})
	started(t, pod, corev1.PodCondition{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonInfeasible,
		Message: "Node didn't have enough capacity: cpu, requested: 4100, capacity: 2000"})
	resizedIs(t, vm, metav1.ConditionFalse, vmv1.ReasonResizeInfeasible, "capacity: 2000", 1, "256Mi")
	waitEvent(t, vm, "ResizeInfeasible")
	podSized(t, vm, 4, "256Mi", []string{"1", "256Mi"})
	// Giving up: the pod goes back to what the guest has.
	resizeSpec(t, vm, 1, "256Mi")
	pod = podSized(t, vm, 1, "256Mi", []string{"1", "256Mi"})
	started(t, pod)
	resizedIs(t, vm, metav1.ConditionTrue, vmv1.ReasonResized, "", 1, "256Mi")
	if p, _ := runnerPod(vm); p.UID != pod.UID {
		t.Fatalf("the runner pod was replaced: %s, was %s", p.UID, pod.UID)
	}
}

// TestNoResizeNoWrites: a VM whose size does not change, resizable or not, costs its pod no
// write and carries no Resized condition; status.guest is its boot size.
func TestNoResizeNoWrites(t *testing.T) {
	ns := namespace(t)
	for _, vm := range []*vmv1.VirtualMachine{resizableVM(ns, "steady-resizable"), resizableVM(ns, "steady-fixed")} {
		if vm.Name == "steady-fixed" {
			vm.Spec.Guest.MaxCPUs, vm.Spec.Guest.MaxMemory = nil, nil
		}
		create(t, vm)
		pod := waitPod(t, vm, "")
		bind(t, pod, "node-steady")
		started(t, pod)
		condition(t, vm, vmv1.PhaseRunning, vmv1.ConditionReady, metav1.ConditionTrue, vmv1.ReasonGuestRunning)
		before, _ := runnerPod(vm)
		reconciled(t, vm, func(v *vmv1.VirtualMachine) { v.Spec.Guest.KernelArgs = "quiet" })
		after, _ := runnerPod(vm)
		if after.ResourceVersion != before.ResourceVersion {
			t.Errorf("%s: the pod was written (%s → %s): %v", vm.Name, before.ResourceVersion, after.ResourceVersion, after.Annotations)
		}
		st := getVM(t, vm).Status
		if c := meta.FindStatusCondition(st.Conditions, vmv1.ConditionResized); c != nil {
			t.Errorf("%s: Resized on a VM never resized: %+v", vm.Name, c)
		}
		if st.Guest == nil || st.Guest.CPUs != 1 || st.Guest.Memory.Cmp(resource.MustParse("256Mi")) != 0 {
			t.Errorf("%s: status.guest %+v, want the boot size", vm.Name, st.Guest)
		}
	}
}

// TestResizeRefusedByAPIServer: a pod on a node whose kubelet does not resize in place (it
// reports no container resources) cannot be resized: the condition says so, in the API server's
// words, and the guest is not asked to grow.
func TestResizeRefusedByAPIServer(t *testing.T) {
	ns := namespace(t)
	vm := create(t, resizableVM(ns, "old-node"))
	pod := waitPod(t, vm, "")
	bind(t, pod, "node-old")
	kubelet(t, pod, func(s *corev1.PodStatus) {
		running(s)
		s.ContainerStatuses[0].Started = ptr.To(true)
	})
	condition(t, vm, vmv1.PhaseRunning, vmv1.ConditionReady, metav1.ConditionTrue, vmv1.ReasonGuestRunning)
	resizeSpec(t, vm, 2, "256Mi")
	resizedIs(t, vm, metav1.ConditionFalse, vmv1.ReasonResizeInfeasible, "without support for resize", 1, "256Mi")
	waitEvent(t, vm, "ResizePodFailed")
	podSized(t, vm, 1, "256Mi", nil)
}
