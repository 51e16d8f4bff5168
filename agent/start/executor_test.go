package start

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/virtpod/virtpod/agent/podcontrol/podcontroltest"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

func started(t *testing.T, pod *corev1.Pod) string {
	return annotation(t, pod, vmv1.AnnotationGuestStarted)
}

func annotation(t *testing.T, pod *corev1.Pod, key string) string {
	t.Helper()
	return podcontroltest.Current(t, env.Client, pod).Annotations[key]
}

// TestExecutorReportsTheStart: the agent asks the runner of each pod on its node that a VM names
// once, as soon as its control socket is there, and writes the guest's start into the pod as
// the runner answers; it leaves alone pods no VM names and other nodes' pods, and asks a runner
// that ended without a start, or does not know the question, once and not again. The machine
// type the runner reports goes with the start; an answer that is not a machine type does not.
func TestExecutorReportsTheStart(t *testing.T) {
	ns := podcontroltest.Namespace(t, env.Client, "start-")
	since := time.Date(2026, 12, 5, 5, 30, 0, 123456789, time.UTC)
	// A runner answers once its guest starts: until Release, its answer is held.
	starting := func(machine string) *podcontroltest.Runner {
		r := &podcontroltest.Runner{}
		r.Answer(http.MethodGet, controlapi.StartedPath, http.StatusOK, controlapi.Started{Started: true, State: "running", Since: since, Machine: machine})
		r.Hold()
		return r
	}
	runners := map[string]*podcontroltest.Runner{
		"web":     starting("pc-q35-7.2"),
		"odd":     starting("pc-q35-7.2,accel=kvm"),
		"foreign": starting(""),
		"far":     starting(""),
		"failed":  {},
		"old":     {}, // from before the question: 404
	}
	runners["failed"].Answer(http.MethodGet, controlapi.StartedPath, http.StatusOK, controlapi.Started{State: "failed", Ended: true})
	node := podcontroltest.NewNode(t, "node-a")
	pods := map[string]*corev1.Pod{}
	for name, r := range runners {
		on := "node-a"
		if name == "far" {
			on = "node-b"
		}
		pods[name] = podcontroltest.RunnerPod(t, env.Client, ns, name, on, name == "foreign")
		dir := node.Dir(pods[name], "ctl-"+name)
		if name != "web" { // web's runner serves its socket later, as a runner does once prepared
			r.Serve(t, dir)
		}
	}
	asked := func(name string) int { return runners[name].Count(http.MethodGet, controlapi.StartedPath) }
	e := &Executor{Agent: node.Agent(t, env)}
	podcontroltest.Run(t, e.Run)

	time.Sleep(300 * time.Millisecond)
	runners["web"].Serve(t, filepath.Join(node.ControlDir, "ctl-web"))
	kubeapi.Eventually(t, "web's runner asked", 10*time.Second, func() error {
		if n := asked("web"); n != 1 {
			return fmt.Errorf("asked %d times", n)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	if got := started(t, pods["web"]); got != "" {
		t.Fatalf("web's start written before its guest started: %q", got)
	}
	runners["web"].Release()
	kubeapi.Eventually(t, "web's start written", 10*time.Second, func() error {
		if got := started(t, pods["web"]); got != "2026-12-05T05:30:00.123456789Z" {
			return fmt.Errorf("guest-started %q", got)
		}
		return nil
	})
	if got := annotation(t, pods["web"], vmv1.AnnotationGuestMachine); got != "pc-q35-7.2" {
		t.Errorf("web's guest-machine %q, want the runner's pc-q35-7.2", got)
	}
	runners["odd"].Release()
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
		if n := asked(name); n != want {
			t.Errorf("%s's runner asked %d times, want %d", name, n, want)
		}
		if name != "web" && name != "odd" {
			if got := started(t, pods[name]); got != "" {
				t.Errorf("%s: guest-started %q, want none", name, got)
			}
		}
	}
}
