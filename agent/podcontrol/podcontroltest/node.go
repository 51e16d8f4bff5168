package podcontroltest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/virtpod/virtpod/agent/podcontrol"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// Node is one simulated node of an executor's test: the node's control directory (short enough
// for unix socket paths) and its kubelet, which says which control device is which pod's.
type Node struct {
	Name       string
	ControlDir string
	Kubelet    *Kubelet
	Socket     string // the kubelet's pod-resources socket
}

// NewNode makes node name's control directory and starts its kubelet, until the test ends.
func NewNode(t testing.TB, name string) *Node {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	k, sock := startKubelet(t)
	return &Node{Name: name, ControlDir: dir, Kubelet: k, Socket: sock}
}

// Dir gives pod the control device id and returns the device's directory, where the pod's
// runner serves.
func (n *Node) Dir(pod *corev1.Pod, id string) string {
	n.Kubelet.Set(pod.Namespace, pod.Name, id)
	return filepath.Join(n.ControlDir, id)
}

// Serve serves r as pod's runner, on control device id, until the test ends.
func (n *Node) Serve(t testing.TB, pod *corev1.Pod, id string, r *Runner) {
	t.Helper()
	r.Serve(t, n.Dir(pod, id))
}

// Agent is what an executor on the node acts with, against env's API server; it logs nowhere.
func (n *Node) Agent(t testing.TB, env *kubeapi.Env) podcontrol.Agent {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return podcontrol.Agent{Client: cs, Kube: env.Client, Node: n.Name, ControlDir: n.ControlDir, PodResources: n.Socket, Log: zap.NewNop()}
}

// Run runs an executor (its Run) until the test ends or stop is called; stop waits for it to
// return and gives its error.
func Run(t testing.TB, run func(context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	go func() { err = run(ctx); close(done) }()
	stop = func() error { cancel(); <-done; return err }
	t.Cleanup(func() { _ = stop() })
	return stop
}
