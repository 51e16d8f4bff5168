package start

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
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
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

// runnerStart answers GET /v1/started as a runner does: it holds the question until the guest
// starts (start is closed) or the wait runs out, and counts the questions. state, when set, is
// a runner that ended without starting its guest; old, one from before the question.
type runnerStart struct {
	start   chan struct{}
	since   time.Time
	machine string
	state   string
	old     bool

	mu    sync.Mutex
	asked int
}

func (r *runnerStart) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.asked++
	r.mu.Unlock()
	if r.old || req.URL.Path != controlapi.StartedPath || req.Method != http.MethodGet {
		http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
		return
	}
	answer := controlapi.Started{State: r.state, Ended: r.state != ""}
	if r.state == "" {
		answer.State = "preparing"
		select {
		case <-r.start:
			answer = controlapi.Started{Started: true, State: "running", Since: r.since, Machine: r.machine}
		case <-time.After(time.Duration(controlapi.MaxStartedWaitSeconds) * time.Second):
		case <-req.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(answer)
}

func (r *runnerStart) count() int { r.mu.Lock(); defer r.mu.Unlock(); return r.asked }

func started(t *testing.T, pod *corev1.Pod) string {
	return annotation(t, pod, vmv1.AnnotationGuestStarted)
}

func annotation(t *testing.T, pod *corev1.Pod, key string) string {
	t.Helper()
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
		t.Fatal(err)
	}
	return p.Annotations[key]
}

// TestExecutorReportsTheStart: the agent asks the runner of each pod on its node that a VM names
// once, as soon as its control socket is there, and writes the guest's start into the pod as
// the runner answers; it leaves alone pods no VM names and other nodes' pods, and asks a runner
// that ended without a start, or does not know the question, once and not again. The machine
// type the runner reports goes with the start; an answer that is not a machine type does not.
func TestExecutorReportsTheStart(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "start-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	controlDir, err := os.MkdirTemp("", "sa")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(controlDir) })
	since := time.Date(2026, 12, 5, 5, 30, 0, 123456789, time.UTC)
	runners := map[string]*runnerStart{
		"web":     {start: make(chan struct{}), since: since, machine: "pc-q35-7.2"},
		"odd":     {start: make(chan struct{}), since: since, machine: "pc-q35-7.2,accel=kvm"},
		"foreign": {start: make(chan struct{}), since: since},
		"far":     {start: make(chan struct{}), since: since},
		"failed":  {state: "failed"},
		"old":     {old: true},
	}
	pods := map[string]*corev1.Pod{}
	devices := map[string]string{}
	for name, r := range runners {
		node := "node-a"
		if name == "far" {
			node = "node-b"
		}
		pods[name] = podcontroltest.RunnerPod(t, env.Client, ns.Name, name, node, name == "foreign")
		devices[ns.Name+"/"+name] = "ctl-" + name
		if name != "web" { // web's runner serves its socket later, as a runner does once prepared
			podcontroltest.ServeRunner(t, filepath.Join(controlDir, "ctl-"+name), r)
		}
	}
	_, kubelet := podcontroltest.Start(t, devices)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	e := &Executor{Agent: podcontrol.Agent{Client: cs, Kube: env.Client, Node: "node-a", ControlDir: controlDir, PodResources: kubelet, Log: zap.NewNop()}}
	go func() { _ = e.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	time.Sleep(300 * time.Millisecond)
	podcontroltest.ServeRunner(t, filepath.Join(controlDir, "ctl-web"), runners["web"])
	kubeapi.Eventually(t, "web's runner asked", 10*time.Second, func() error {
		if n := runners["web"].count(); n != 1 {
			return fmt.Errorf("asked %d times", n)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	if got := started(t, pods["web"]); got != "" {
		t.Fatalf("web's start written before its guest started: %q", got)
	}
	close(runners["web"].start)
	kubeapi.Eventually(t, "web's start written", 10*time.Second, func() error {
		if got := started(t, pods["web"]); got != "2026-12-05T05:30:00.123456789Z" {
			return fmt.Errorf("guest-started %q", got)
		}
		return nil
	})
	if got := annotation(t, pods["web"], vmv1.AnnotationGuestMachine); got != "pc-q35-7.2" {
		t.Errorf("web's guest-machine %q, want the runner's pc-q35-7.2", got)
	}
	close(runners["odd"].start)
	kubeapi.Eventually(t, "odd's start written", 10*time.Second, func() error {
		if got := started(t, pods["odd"]); got == "" {
			return fmt.Errorf("no guest-started")
		}
		return nil
	})
	if got := annotation(t, pods["odd"], vmv1.AnnotationGuestMachine); got != "" {
		t.Errorf("odd's guest-machine %q: an answer that is no machine type was written", got)
	}

	time.Sleep(time.Second)
	for name, want := range map[string]int{"web": 1, "odd": 1, "failed": 1, "old": 1, "foreign": 0, "far": 0} {
		if n := runners[name].count(); n != want {
			t.Errorf("%s's runner asked %d times, want %d", name, n, want)
		}
		if name != "web" && name != "odd" {
			if got := started(t, pods[name]); got != "" {
				t.Errorf("%s: guest-started %q, want none", name, got)
			}
		}
	}
	close(runners["foreign"].start)
	close(runners["far"].start)
}
