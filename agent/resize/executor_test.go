package resize

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/virtpod/virtpod/agent/podcontrol/podcontroltest"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

// sizeRunner is a runner whose guest takes every size it is asked for.
func sizeRunner() *podcontroltest.Runner {
	r := &podcontroltest.Runner{}
	r.AnswerFunc(http.MethodPut, controlapi.SizePath, resized)
	return r
}

// resized is a runner's answer to a PUT of a size its guest takes: the guest has it.
func resized(req podcontroltest.Request) (int, any) {
	var want Size
	if err := req.Decode(&want); err != nil {
		return http.StatusBadRequest, controlapi.Size{Error: "body"}
	}
	return http.StatusOK, controlapi.Size{CPUs: want.CPUs, Memory: want.Memory, MaxCPUs: 4, MaxMemory: "1Gi"}
}

// sizesAsked are the sizes r was asked for, in order.
func sizesAsked(t *testing.T, r *podcontroltest.Runner) []Size {
	t.Helper()
	var sizes []Size
	for _, req := range r.Requests(http.MethodPut, controlapi.SizePath) {
		var s Size
		if err := req.Decode(&s); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, s)
	}
	return sizes
}

// kubeletResizing says the kubelet has a resize of p pending or under way.
func kubeletResizing(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodResizeInProgress || c.Type == corev1.PodResizePending {
			return true
		}
	}
	return false
}

// runnerPodOn creates a running runner pod on node, booted with 1 CPU and 256Mi, the kubelet
// having seen its spec, controlled by a VirtualMachine of the same name whose status names it,
// as the controller makes them.
func runnerPodOn(t *testing.T, ns, name, node string) *corev1.Pod {
	t.Helper()
	vm := podcontroltest.VM(t, env.Client, ns, name)
	pod := unownedPodOn(t, ns, name, node, func(p *corev1.Pod) { podcontroltest.Own(p, vm) })
	podcontroltest.Name(t, env.Client, vm, pod)
	return pod
}

// unownedPodOn creates a running pod on node that looks like a runner pod (virtpod's label,
// the runner container), changed by mutate before it is created.
func unownedPodOn(t *testing.T, ns, name, node string, mutate func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{vmv1.LabelManagedBy: vmv1.ManagedBy}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: vmv1.RunnerContainer, Image: "runner",
			Args: []string{"--cpus=1", "--memory-mib=256"}}}}}
	if mutate != nil {
		mutate(pod)
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	setStatus(t, pod, nil)
	return pod
}

// setStatus writes the pod running, with the kubelet's resize conditions conds.
func setStatus(t *testing.T, pod *corev1.Pod, conds []corev1.PodCondition) {
	t.Helper()
	kubeapi.Eventually(t, "pod status", 10*time.Second, func() error {
		p := &corev1.Pod{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
			return err
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, ObservedGeneration: p.Generation, Conditions: conds}
		return env.Client.Status().Update(context.Background(), p)
	})
}

func annotate(t *testing.T, pod *corev1.Pod, kv ...string) {
	t.Helper()
	ann := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		ann[kv[i]] = kv[i+1]
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err := env.Client.Patch(context.Background(), pod, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
}

// startExecutor runs an executor on node until the test ends or the returned stop is called.
func startExecutor(t *testing.T, node *podcontroltest.Node) func() error {
	t.Helper()
	e := &Executor{Agent: node.Agent(t, env), Timeout: 20 * time.Second}
	return podcontroltest.Run(t, e.Run)
}

// guestIs waits for the agent's report on the pod.
func guestIs(t *testing.T, pod *corev1.Pod, cpus, memory, failure string) {
	t.Helper()
	kubeapi.Eventually(t, fmt.Sprintf("guest %s/%s, error %q", cpus, memory, failure), 20*time.Second, func() error {
		p := &corev1.Pod{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
			return err
		}
		a := p.Annotations
		if a[vmv1.AnnotationGuestCPUs] != cpus || a[vmv1.AnnotationGuestMemory] != memory || !strings.Contains(a[vmv1.AnnotationResizeError], failure) ||
			(failure == "" && a[vmv1.AnnotationResizeError] != "") {
			return fmt.Errorf("annotations %v", a)
		}
		return nil
	})
}

func namespace(t *testing.T) string { return podcontroltest.Namespace(t, env.Client, "resize-") }

// TestExecutorResizes: the agent finds the pod's runner through the kubelet's device, asks it
// for the desired size once the kubelet has resized the pod, writes back what the guest has,
// and leaves other nodes' pods and pods never resized alone.
func TestExecutorResizes(t *testing.T) {
	ns := namespace(t)
	node := podcontroltest.NewNode(t, "node-a")
	pod := runnerPodOn(t, ns, "web-runner", "node-a")
	other := runnerPodOn(t, ns, "far-runner", "node-b")
	still := runnerPodOn(t, ns, "still-runner", "node-a")
	runner, far, quiet := &podcontroltest.Runner{}, sizeRunner(), sizeRunner()
	// A request while the kubelet has a resize of the pod pending or under way is early.
	var early atomic.Int32
	answer := func(req podcontroltest.Request) (int, any) {
		if p := (&corev1.Pod{}); env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p) == nil && kubeletResizing(p) {
			early.Add(1)
		}
		return resized(req)
	}
	runner.AnswerFunc(http.MethodPut, controlapi.SizePath, answer)
	node.Serve(t, pod, "control7", runner)
	node.Serve(t, other, "control8", far)
	node.Serve(t, still, "control9", quiet)
	startExecutor(t, node)

	// A grow asked while the kubelet still resizes the pod waits for it.
	setStatus(t, pod, []corev1.PodCondition{{Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue}})
	annotate(t, pod, vmv1.AnnotationDesiredCPUs, "3", vmv1.AnnotationDesiredMemory, "768Mi")
	annotate(t, other, vmv1.AnnotationDesiredCPUs, "2", vmv1.AnnotationDesiredMemory, "512Mi")
	annotate(t, still, "unrelated", "x") // an event for a pod never resized
	setStatus(t, still, nil)
	setStatus(t, pod, nil)
	guestIs(t, pod, "3", "768Mi", "")
	if n := early.Load(); n != 0 {
		t.Fatalf("the runner was asked %d times while the kubelet resized the pod", n)
	}
	if got := sizesAsked(t, runner); len(got) != 1 || got[0] != (Size{CPUs: 3, Memory: "768Mi"}) {
		t.Fatalf("runner asked %v, want once for 3/768Mi", got)
	}

	// A refusal is written in the runner's words; the guest's size is what it says it has.
	runner.Answer(http.MethodPut, controlapi.SizePath, http.StatusUnprocessableEntity,
		controlapi.Size{CPUs: 3, Memory: "768Mi", Error: "memory: 640Mi is not a multiple of 128Mi"})
	annotate(t, pod, vmv1.AnnotationDesiredMemory, "640Mi")
	guestIs(t, pod, "3", "768Mi", "640Mi is not a multiple of 128Mi")
	runner.AnswerFunc(http.MethodPut, controlapi.SizePath, answer)
	annotate(t, pod, vmv1.AnnotationDesiredCPUs, "1", vmv1.AnnotationDesiredMemory, "256Mi") // a shrink: no kubelet step first
	guestIs(t, pod, "1", "256Mi", "")

	if n := far.Count(http.MethodPut, controlapi.SizePath); n != 0 {
		t.Errorf("the agent of node-a resized a pod of node-b %d times", n)
	}
	if n := quiet.Count(http.MethodPut, controlapi.SizePath); n != 0 {
		t.Errorf("a pod never resized was asked %d times", n)
	}
}

// TestExecutorConvergesAfterRestart: an agent stopped in the middle of a resize leaves it to
// the next one, which asks again (the runner's API is idempotent) and reports.
func TestExecutorConvergesAfterRestart(t *testing.T) {
	ns := namespace(t)
	node := podcontroltest.NewNode(t, "node-c")
	pod := runnerPodOn(t, ns, "web-runner", "node-c")
	runner := sizeRunner()
	runner.Hold()
	node.Serve(t, pod, "control1", runner)
	stop := startExecutor(t, node)
	annotate(t, pod, vmv1.AnnotationDesiredCPUs, "2", vmv1.AnnotationDesiredMemory, "512Mi")
	kubeapi.Eventually(t, "the runner is asked", 20*time.Second, func() error {
		if runner.Count(http.MethodPut, controlapi.SizePath) == 0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	_ = stop() // the agent restarts mid-resize
	runner.Release()
	p := podcontroltest.Current(t, env.Client, pod)
	if _, ok := p.Annotations[vmv1.AnnotationGuestCPUs]; ok {
		t.Fatalf("a stopped agent reported: %v", p.Annotations)
	}
	startExecutor(t, node)
	guestIs(t, pod, "2", "512Mi", "")
	if n := runner.Count(http.MethodPut, controlapi.SizePath); n != 2 {
		t.Errorf("runner asked %d times, want twice (once per agent)", n)
	}
}

// TestExecutorNoRunnerSocket: a pod whose runner has no control socket is reported, not
// retried silently.
func TestExecutorNoRunnerSocket(t *testing.T) {
	ns := namespace(t)
	node := podcontroltest.NewNode(t, "node-d")
	pod := runnerPodOn(t, ns, "old-runner", "node-d")
	node.Dir(pod, "control2") // no runner serves there
	startExecutor(t, node)
	annotate(t, pod, vmv1.AnnotationDesiredCPUs, "2", vmv1.AnnotationDesiredMemory, "256Mi")
	guestIs(t, pod, "", "", "control socket does not answer")
}
