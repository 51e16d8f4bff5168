package resize

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/virtpod/virtpod/agent/podcontrol/podcontroltest"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestExecutorActsOnlyForTheControllersPods: pods that merely look like runner pods — the
// label without an owner, an owner reference to a VM whose status names another pod, one with
// a VM's name but not its UID — are never resized and get nothing written, while the VM's own
// pod beside them is.
func TestExecutorActsOnlyForTheControllersPods(t *testing.T) {
	ns := namespace(t)
	node := podcontroltest.NewNode(t, "node-t")
	vm := podcontroltest.VM(t, env.Client, ns, "web")
	real := unownedPodOn(t, ns, "web-runner", "node-t", func(p *corev1.Pod) { podcontroltest.Own(p, vm) })
	podcontroltest.Name(t, env.Client, vm, real)
	labelled := unownedPodOn(t, ns, "labelled-runner", "node-t", nil)
	sibling := unownedPodOn(t, ns, "sibling-runner", "node-t", func(p *corev1.Pod) { podcontroltest.Own(p, vm) })
	forged := unownedPodOn(t, ns, "forged-runner", "node-t", func(p *corev1.Pod) {
		podcontroltest.Own(p, vm)
		p.OwnerReferences[0].UID = types.UID("0d1e5f6a-0000-4000-8000-000000000000")
	})
	runners := map[string]*podcontroltest.Runner{}
	for i, p := range []*corev1.Pod{real, labelled, sibling, forged} {
		runners[p.Name] = sizeRunner()
		node.Serve(t, p, fmt.Sprintf("control%d", i+1), runners[p.Name])
	}
	core, logs := observer.New(zap.InfoLevel)
	e := &Executor{Agent: node.Agent(t, env), Timeout: 20 * time.Second}
	e.Log = zap.New(core)
	podcontroltest.Run(t, e.Run)
	for _, p := range []*corev1.Pod{labelled, sibling, forged, real} {
		annotate(t, p, vmv1.AnnotationDesiredCPUs, "2", vmv1.AnnotationDesiredMemory, "512Mi")
	}
	guestIs(t, real, "2", "512Mi", "")
	for _, p := range []*corev1.Pod{labelled, sibling, forged} {
		kubeapi.Eventually(t, "the refusal of "+p.Name+" logged", 10*time.Second, func() error {
			for _, e := range logs.FilterField(zap.String("pod", ns+"/"+p.Name)).All() {
				if err, ok := e.ContextMap()["error"].(string); ok && strings.Contains(err, "the node agent acts only for pods the controller made") {
					return nil
				}
			}
			return fmt.Errorf("not yet")
		})
	}
	for _, p := range []*corev1.Pod{labelled, sibling, forged} {
		if n := runners[p.Name].Count(http.MethodPut, controlapi.SizePath); n != 0 {
			t.Errorf("%s: its runner was asked %d times", p.Name, n)
		}
		cur := podcontroltest.Current(t, env.Client, p)
		for _, k := range []string{vmv1.AnnotationGuestCPUs, vmv1.AnnotationGuestMemory, vmv1.AnnotationResizeError} {
			if v, ok := cur.Annotations[k]; ok {
				t.Errorf("%s: the agent wrote %s=%q on a pod no VM's status names", p.Name, k, v)
			}
		}
	}
}

// TestExecutorRefusesSymlinkedSocket: a VM's own pod whose runner.sock is a symlink to
// another pod's (its runner container can write its control directory) is refused with an
// error naming the link; the other runner gets no request, and nothing of its answer (its
// bounds) reaches the pod.
func TestExecutorRefusesSymlinkedSocket(t *testing.T) {
	ns := namespace(t)
	node := podcontroltest.NewNode(t, "node-s")
	attacker := runnerPodOn(t, ns, "mallory-runner", "node-s")
	victim := &podcontroltest.Runner{}
	victim.Fail(http.MethodPut, controlapi.SizePath, http.StatusUnprocessableEntity, "cpus: 9 is more than maxCPUs 7")
	victim.Serve(t, filepath.Join(node.ControlDir, "control2")) // no pod's: only the link leads there
	dir := node.Dir(attacker, "control1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, vmv1.ControlSocketName)
	if err := os.Symlink("../control2/"+vmv1.ControlSocketName, link); err != nil {
		t.Fatal(err)
	}
	startExecutor(t, node)
	annotate(t, attacker, vmv1.AnnotationDesiredCPUs, "9", vmv1.AnnotationDesiredMemory, "512Mi")
	guestIs(t, attacker, "", "", link+" is or passes through a symlink")
	if n := victim.Count(http.MethodPut, controlapi.SizePath); n != 0 {
		t.Fatalf("the victim's runner was asked %d times through the link", n)
	}
	cur := podcontroltest.Current(t, env.Client, attacker)
	if msg := cur.Annotations[vmv1.AnnotationResizeError]; strings.Contains(msg, "maxCPUs") {
		t.Fatalf("the victim's bounds reached the attacker: %q", msg)
	}
}
