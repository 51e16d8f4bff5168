package facts

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

// runnerAnswers serves GET /v1/guest as a runner does, with whatever it is set to say, and
// counts the asks.
type runnerAnswers struct {
	mu    sync.Mutex
	say   controlapi.Guest
	asked int
}

func (r *runnerAnswers) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != controlapi.GuestPath || req.Method != http.MethodGet {
		http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked++
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(r.say)
}

func (r *runnerAnswers) set(g controlapi.Guest) { r.mu.Lock(); r.say = g; r.mu.Unlock() }
func (r *runnerAnswers) count() int             { r.mu.Lock(); defer r.mu.Unlock(); return r.asked }

func facts(t *testing.T, pod *corev1.Pod) (string, string) {
	t.Helper()
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
		t.Fatal(err)
	}
	return p.Annotations[vmv1.AnnotationGuestFacts], p.ResourceVersion
}

// TestExecutorCarriesFacts: the agent asks the runner of each pod on its node that has the
// agent channel and a VM names, writes the answer into the pod when it changed and only then,
// asks often while no agent answers and seldom once one does, and leaves alone pods without
// the channel, pods no VM names and other nodes' pods.
func TestExecutorCarriesFacts(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "facts-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	controlDir, err := os.MkdirTemp("", "fa")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(controlDir) })
	web := podcontroltest.RunnerPod(t, env.Client, ns.Name, "web", "node-a", false, "--name=web", "--guest-agent")
	old := podcontroltest.RunnerPod(t, env.Client, ns.Name, "old", "node-a", false, "--name=old")
	foreign := podcontroltest.RunnerPod(t, env.Client, ns.Name, "foreign", "node-a", true, "--name=foreign", "--guest-agent")
	far := podcontroltest.RunnerPod(t, env.Client, ns.Name, "far", "node-b", false, "--name=far", "--guest-agent")
	answers := map[string]*runnerAnswers{}
	devices := map[string]string{}
	for _, p := range []*corev1.Pod{web, old, foreign, far} {
		answers[p.Name] = &runnerAnswers{say: controlapi.Guest{Channel: true}}
		devices[p.Namespace+"/"+p.Name] = "ctl-" + p.Name
		podcontroltest.ServeRunner(t, filepath.Join(controlDir, "ctl-"+p.Name), answers[p.Name])
	}
	_, kubelet := podcontroltest.Start(t, devices)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	e := &Executor{Agent: podcontrol.Agent{Client: cs, Kube: env.Client, Node: "node-a", ControlDir: controlDir, PodResources: kubelet, Log: zap.NewNop()},
		AskWaiting: 100 * time.Millisecond, AskConnected: time.Hour}
	go func() { _ = e.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	// No agent yet: the pod says so, and the runner is asked again and again.
	kubeapi.Eventually(t, "web's facts: a channel, no agent", 20*time.Second, func() error {
		if got, _ := facts(t, web); got != `{"channel":true,"connected":false}` {
			return fmt.Errorf("facts %q", got)
		}
		return nil
	})
	_, rv := facts(t, web)
	asked := answers["web"].count()
	kubeapi.Eventually(t, "web's runner asked again", 10*time.Second, func() error {
		if answers["web"].count() < asked+5 {
			return fmt.Errorf("asked %d times", answers["web"].count()-asked)
		}
		return nil
	})
	if _, now := facts(t, web); now != rv {
		t.Errorf("the pod was written again with nothing changed (resourceVersion %s → %s)", rv, now)
	}

	// The agent answers: written once, then asked seldom (AskConnected).
	answers["web"].set(controlapi.Guest{Channel: true, Connected: true, Hostname: "web", OS: &vmv1.GuestOSInfo{ID: "debian"}})
	kubeapi.Eventually(t, "web's facts: connected", 20*time.Second, func() error {
		if got, _ := facts(t, web); got != `{"channel":true,"connected":true,"os":{"id":"debian"},"hostname":"web"}` {
			return fmt.Errorf("facts %q", got)
		}
		return nil
	})
	asked = answers["web"].count()
	time.Sleep(time.Second)
	if n := answers["web"].count(); n > asked+1 {
		t.Errorf("a connected guest's runner was asked %d times in a second", n-asked)
	}

	for _, p := range []*corev1.Pod{old, foreign, far} {
		if got, _ := facts(t, p); got != "" || answers[p.Name].count() != 0 {
			t.Errorf("pod %s: facts %q, its runner asked %d times; want neither", p.Name, got, answers[p.Name].count())
		}
	}
}
