package resize

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/virtpod/virtpod/agent/podcontrol"
	"github.com/virtpod/virtpod/agent/podcontrol/podcontroltest"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

func startKubelet(t *testing.T, devices map[string]string) string {
	t.Helper()
	_, sock := podcontroltest.Start(t, devices)
	return sock
}

// fakeRunner answers the runner's control API on its socket as the runner does: the size it
// is asked for, or, when refuse is set, its refusal; hold blocks answers until closed.
type fakeRunner struct {
	mu     sync.Mutex
	asked  []Size
	size   Size
	refuse string
	hold   chan struct{}
	// pod, when set, is read at each request: a request while the kubelet has a resize
	// pending or under way is counted in early.
	pod   *corev1.Pod
	early int
}

func (r *fakeRunner) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/size" || req.Method != http.MethodPut {
		http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
		return
	}
	var want Size
	if err := json.NewDecoder(req.Body).Decode(&want); err != nil {
		http.Error(w, `{"error":"body"}`, http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.asked = append(r.asked, want)
	hold, refuse, pod := r.hold, r.refuse, r.pod
	r.mu.Unlock()
	if pod != nil {
		p := &corev1.Pod{}
		if err := env.Client.Get(req.Context(), client.ObjectKeyFromObject(pod), p); err == nil && !kubeletDoneForTest(p) {
			r.mu.Lock()
			r.early++
			r.mu.Unlock()
		}
	}
	r.mu.Lock()
	r.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-req.Context().Done():
			return
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if refuse != "" {
		w.WriteHeader(http.StatusUnprocessableEntity)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": refuse, "cpus": r.size.CPUs, "memory": r.size.Memory})
		return
	}
	r.size = want
	_ = json.NewEncoder(w).Encode(map[string]any{"cpus": want.CPUs, "memory": want.Memory, "maxCPUs": 4, "maxMemory": "1Gi", "pending": false})
}

func kubeletDoneForTest(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodResizeInProgress || c.Type == corev1.PodResizePending {
			return false
		}
	}
	return true
}

func (r *fakeRunner) requests() []Size {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Size(nil), r.asked...)
}

// startRunner serves a fake runner in controlDir/<id>/runner.sock, as the device plugin's
// directory mounted into the runner holds it.
func startRunner(t *testing.T, controlDir, id string, r *fakeRunner) {
	t.Helper()
	podcontroltest.ServeRunner(t, filepath.Join(controlDir, id), r)
}

// shortDir is a temporary directory short enough for unix socket paths.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "rz")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
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

func startExecutor(t *testing.T, node, controlDir, kubeletSock string) context.CancelFunc {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	e := &Executor{Agent: podcontrol.Agent{Client: cs, Kube: env.Client, Node: node, ControlDir: controlDir, PodResources: kubeletSock, Log: zap.NewNop()}, Timeout: 20 * time.Second}
	go func() { _ = e.Run(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
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

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "resize-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// TestExecutorResizes: the agent finds the pod's runner through the kubelet's device, asks it
// for the desired size once the kubelet has resized the pod, writes back what the guest has,
// and leaves other nodes' pods and pods never resized alone.
func TestExecutorResizes(t *testing.T) {
	ns := namespace(t)
	controlDir := shortDir(t)
	pod := runnerPodOn(t, ns, "web-runner", "node-a")
	other := runnerPodOn(t, ns, "far-runner", "node-b")
	still := runnerPodOn(t, ns, "still-runner", "node-a")
	runner, far, quiet := &fakeRunner{pod: pod}, &fakeRunner{}, &fakeRunner{}
	startRunner(t, controlDir, "control7", runner)
	startRunner(t, controlDir, "control8", far)
	startRunner(t, controlDir, "control9", quiet)
	sock := startKubelet(t, map[string]string{ns + "/web-runner": "control7", ns + "/far-runner": "control8", ns + "/still-runner": "control9"})
	startExecutor(t, "node-a", controlDir, sock)

	// A grow asked while the kubelet still resizes the pod waits for it.
	setStatus(t, pod, []corev1.PodCondition{{Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue}})
	annotate(t, pod, vmv1.AnnotationDesiredCPUs, "3", vmv1.AnnotationDesiredMemory, "768Mi")
	annotate(t, other, vmv1.AnnotationDesiredCPUs, "2", vmv1.AnnotationDesiredMemory, "512Mi")
	annotate(t, still, "unrelated", "x") // an event for a pod never resized
	setStatus(t, still, nil)
	setStatus(t, pod, nil)
	guestIs(t, pod, "3", "768Mi", "")
	if runner.early != 0 {
		t.Fatalf("the runner was asked %d times while the kubelet resized the pod", runner.early)
	}
	if got := runner.requests(); len(got) != 1 || got[0] != (Size{CPUs: 3, Memory: "768Mi"}) {
		t.Fatalf("runner asked %v, want once for 3/768Mi", got)
	}

	// A refusal is written in the runner's words; the guest's size is what it says it has.
	runner.mu.Lock()
	runner.refuse = "memory: 640Mi is not a multiple of 128Mi"
	runner.mu.Unlock()
	annotate(t, pod, vmv1.AnnotationDesiredMemory, "640Mi")
	guestIs(t, pod, "3", "768Mi", "640Mi is not a multiple of 128Mi")
	runner.mu.Lock()
	runner.refuse = ""
	runner.mu.Unlock()
	annotate(t, pod, vmv1.AnnotationDesiredCPUs, "1", vmv1.AnnotationDesiredMemory, "256Mi") // a shrink: no kubelet step first
	guestIs(t, pod, "1", "256Mi", "")

	if n := len(far.requests()); n != 0 {
		t.Errorf("the agent of node-a resized a pod of node-b %d times", n)
	}
	if n := len(quiet.requests()); n != 0 {
		t.Errorf("a pod never resized was asked %d times", n)
	}
}

// TestExecutorConvergesAfterRestart: an agent stopped in the middle of a resize leaves it to
// the next one, which asks again (the runner's API is idempotent) and reports.
func TestExecutorConvergesAfterRestart(t *testing.T) {
	ns := namespace(t)
	controlDir := shortDir(t)
	pod := runnerPodOn(t, ns, "web-runner", "node-c")
	runner := &fakeRunner{hold: make(chan struct{})}
	startRunner(t, controlDir, "control1", runner)
	sock := startKubelet(t, map[string]string{ns + "/web-runner": "control1"})
	stop := startExecutor(t, "node-c", controlDir, sock)
	annotate(t, pod, vmv1.AnnotationDesiredCPUs, "2", vmv1.AnnotationDesiredMemory, "512Mi")
	kubeapi.Eventually(t, "the runner is asked", 20*time.Second, func() error {
		if len(runner.requests()) == 0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	stop() // the agent restarts mid-resize
	runner.mu.Lock()
	close(runner.hold)
	runner.hold = nil
	runner.mu.Unlock()
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Annotations[vmv1.AnnotationGuestCPUs]; ok {
		t.Fatalf("a stopped agent reported: %v", p.Annotations)
	}
	startExecutor(t, "node-c", controlDir, sock)
	guestIs(t, pod, "2", "512Mi", "")
	if n := len(runner.requests()); n != 2 {
		t.Errorf("runner asked %d times, want twice (once per agent)", n)
	}
}

// TestExecutorNoRunnerSocket: a pod whose runner has no control socket is reported, not
// retried silently.
func TestExecutorNoRunnerSocket(t *testing.T) {
	ns := namespace(t)
	pod := runnerPodOn(t, ns, "old-runner", "node-d")
	sock := startKubelet(t, map[string]string{ns + "/old-runner": "control2"})
	startExecutor(t, "node-d", shortDir(t), sock)
	annotate(t, pod, vmv1.AnnotationDesiredCPUs, "2", vmv1.AnnotationDesiredMemory, "256Mi")
	guestIs(t, pod, "", "", "control socket does not answer")
}
