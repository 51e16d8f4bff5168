package facts

import (
	"fmt"
	"net/http"
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

// says has the runner answer GET /v1/guest with g: what the guest agent says.
func says(r *podcontroltest.Runner, g controlapi.Guest) {
	r.Answer(http.MethodGet, controlapi.GuestPath, http.StatusOK, g)
}

func facts(t *testing.T, pod *corev1.Pod) (string, string) {
	t.Helper()
	p := podcontroltest.Current(t, env.Client, pod)
	return p.Annotations[vmv1.AnnotationGuestFacts], p.ResourceVersion
}

// TestExecutorCarriesFacts: the agent asks the runner of each pod on its node that has the
// agent channel and a VM names, writes the answer into the pod when it changed and only then,
// asks often while no agent answers and seldom once one does, and leaves alone pods without
// the channel, pods no VM names and other nodes' pods.
func TestExecutorCarriesFacts(t *testing.T) {
	ns := podcontroltest.Namespace(t, env.Client, "facts-")
	web := podcontroltest.RunnerPod(t, env.Client, ns, "web", "node-a", false, "--name=web", "--guest-agent")
	old := podcontroltest.RunnerPod(t, env.Client, ns, "old", "node-a", false, "--name=old")
	foreign := podcontroltest.RunnerPod(t, env.Client, ns, "foreign", "node-a", true, "--name=foreign", "--guest-agent")
	far := podcontroltest.RunnerPod(t, env.Client, ns, "far", "node-b", false, "--name=far", "--guest-agent")
	node := podcontroltest.NewNode(t, "node-a")
	runners := map[string]*podcontroltest.Runner{}
	for _, p := range []*corev1.Pod{web, old, foreign, far} {
		runners[p.Name] = &podcontroltest.Runner{}
		says(runners[p.Name], controlapi.Guest{Channel: true})
		node.Serve(t, p, "ctl-"+p.Name, runners[p.Name])
	}
	asked := func(name string) int { return runners[name].Count(http.MethodGet, controlapi.GuestPath) }
	e := &Executor{Agent: node.Agent(t, env), AskWaiting: 100 * time.Millisecond, AskConnected: time.Hour}
	podcontroltest.Run(t, e.Run)

	// No agent yet: the pod says so, and the runner is asked again and again.
	kubeapi.Eventually(t, "web's facts: a channel, no agent", 20*time.Second, func() error {
		if got, _ := facts(t, web); got != `{"channel":true,"connected":false}` {
			return fmt.Errorf("facts %q", got)
		}
		return nil
	})
	_, rv := facts(t, web)
	before := asked("web")
	kubeapi.Eventually(t, "web's runner asked again", 10*time.Second, func() error {
		if asked("web") < before+5 {
			return fmt.Errorf("asked %d times", asked("web")-before)
		}
		return nil
	})
	if _, now := facts(t, web); now != rv {
		t.Errorf("the pod was written again with nothing changed (resourceVersion %s → %s)", rv, now)
	}

	// The agent answers: written once, then asked seldom (AskConnected).
	says(runners["web"], controlapi.Guest{Channel: true, Connected: true, Hostname: "web", OS: &vmv1.GuestOSInfo{ID: "debian"}})
	kubeapi.Eventually(t, "web's facts: connected", 20*time.Second, func() error {
		if got, _ := facts(t, web); got != `{"channel":true,"connected":true,"os":{"id":"debian"},"hostname":"web"}` {
			return fmt.Errorf("facts %q", got)
		}
		return nil
	})
	before = asked("web")
	time.Sleep(time.Second)
	if n := asked("web"); n > before+1 {
		t.Errorf("a connected guest's runner was asked %d times in a second", n-before)
	}

	for _, p := range []*corev1.Pod{old, foreign, far} {
		if got, _ := facts(t, p); got != "" || asked(p.Name) != 0 {
			t.Errorf("pod %s: facts %q, its runner asked %d times; want neither", p.Name, got, asked(p.Name))
		}
	}
}
