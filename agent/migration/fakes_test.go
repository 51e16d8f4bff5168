package migration

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/virtpod/virtpod/agent/podcontrol/podcontroltest"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

// agentNamespace holds the agents' Secret in these tests.
const agentNamespace = "virtpod-agents"

// sourceRunner is a source runner's control API, on the one fake runner, with a "QEMU" that,
// once PUT, connects to the agent's migrate-out.sock and writes size pseudo-random bytes (chunk
// at a time, pausing delay between chunks), then waits for the far end to close, as the
// runner's state moves from none through active to completed (or failed, or cancelled by
// DELETE).
type sourceRunner struct {
	*podcontroltest.Runner
	dir   string
	size  int
	delay time.Duration

	mu      sync.Mutex
	st      controlapi.MigrationStatus
	sum     [32]byte // of what QEMU sent
	sockErr string   // what was wrong with migrate-out.sock at the PUT
	cancel  chan struct{}
}

// newSourceRunner is a source runner in state st; serve it with serve.
func newSourceRunner(st controlapi.MigrationStatus, size int, delay time.Duration) *sourceRunner {
	r := &sourceRunner{Runner: &podcontroltest.Runner{}, st: st, size: size, delay: delay}
	r.AnswerFunc(http.MethodGet, controlapi.MigrationPath, r.get)
	r.AnswerFunc(http.MethodPut, controlapi.MigrationPath, r.put)
	r.AnswerFunc(http.MethodDelete, controlapi.MigrationPath, r.delete)
	return r
}

// serve serves the runner in dir, where QEMU finds migrate-out.sock, until the test ends.
func (r *sourceRunner) serve(t *testing.T, dir string) {
	t.Helper()
	r.dir = dir
	r.Serve(t, dir)
}

func (r *sourceRunner) get(podcontroltest.Request) (int, any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return http.StatusOK, r.st
}

// put starts the send, checking that the agent listens on migrate-out.sock first; a PUT while
// active is refused, as the runner does.
func (r *sourceRunner) put(req podcontroltest.Request) (int, any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var body controlapi.MigrationRequest
	if err := req.Decode(&body); err != nil || !body.AutoConverge {
		r.st.Error = fmt.Sprintf("body %+v (%v): auto-converge wanted", body, err)
		return http.StatusBadRequest, r.st
	}
	if r.st.State == controlapi.MigrationActive {
		return http.StatusConflict, r.st
	}
	sock := filepath.Join(r.dir, controlapi.MigrateOutSocket)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		r.sockErr = fmt.Sprintf("%s at the PUT: %v %v", sock, fi, err)
	}
	r.st = controlapi.MigrationStatus{Role: controlapi.RoleSource, State: controlapi.MigrationActive, TotalBytes: int64(r.size), RemainingBytes: int64(r.size)}
	r.cancel = make(chan struct{})
	go r.qemu(sock, r.cancel)
	return http.StatusAccepted, r.st
}

// delete cancels an active send, or resumes the guest after a completed one.
func (r *sourceRunner) delete(podcontroltest.Request) (int, any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.st.State {
	case controlapi.MigrationActive:
		close(r.cancel)
		r.st.State = controlapi.MigrationCancelled
	case controlapi.MigrationCompleted:
		r.st = controlapi.MigrationStatus{Role: controlapi.RoleSource, State: controlapi.MigrationNone}
	}
	return http.StatusOK, r.st
}

func (r *sourceRunner) qemu(sock string, cancel chan struct{}) {
	fail := func(err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.st.State == controlapi.MigrationActive {
			r.st.State, r.st.Error = controlapi.MigrationFailed, "Unable to write to socket: "+err.Error()
		}
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		fail(err)
		return
	}
	defer c.Close()
	go func() { <-cancel; c.Close() }()
	rnd := rand.NewChaCha8([32]byte{7})
	h := sha256.New()
	chunk := make([]byte, 256<<10)
	for sent := 0; sent < r.size; sent += len(chunk) {
		_, _ = rnd.Read(chunk)
		h.Write(chunk)
		if _, err := c.Write(chunk); err != nil {
			fail(err)
			return
		}
		r.mu.Lock()
		r.st.TransferredBytes, r.st.RemainingBytes = int64(sent+len(chunk)), int64(r.size-sent-len(chunk))
		r.mu.Unlock()
		time.Sleep(r.delay)
	}
	_ = c.(*net.UnixConn).CloseWrite()
	if _, err := io.Copy(io.Discard, c); err != nil {
		fail(err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	copy(r.sum[:], h.Sum(nil))
	if r.st.State == controlapi.MigrationActive {
		r.st.State, r.st.DowntimeMs, r.st.TotalTimeMs = controlapi.MigrationCompleted, 42, 1000
	}
}

func (r *sourceRunner) counts() (puts, deletes int) {
	return r.Count(http.MethodPut, controlapi.MigrationPath), r.Count(http.MethodDelete, controlapi.MigrationPath)
}

// asked is the last PUT's body.
func (r *sourceRunner) asked(t *testing.T) controlapi.MigrationRequest {
	t.Helper()
	var body controlapi.MigrationRequest
	if puts := r.Requests(http.MethodPut, controlapi.MigrationPath); len(puts) > 0 {
		if err := puts[len(puts)-1].Decode(&body); err != nil {
			t.Fatal(err)
		}
	}
	return body
}

// targetQEMU listens on migrate-in.sock in dir, as a target QEMU with -incoming does, and
// takes one stream: its bytes and their hash.
type targetQEMU struct {
	mu    sync.Mutex
	conns int
	n     int64
	sum   [32]byte
	done  chan struct{}
}

func listenTarget(t *testing.T, dir string) *targetQEMU {
	return listenTargetOn(t, dir, controlapi.MigrateInSocket)
}

// listenTargetOn is listenTarget on another of the target's sockets (its NBD server's).
func listenTargetOn(t *testing.T, dir, sock string) *targetQEMU {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, sock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	q := &targetQEMU{done: make(chan struct{})}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			q.mu.Lock()
			q.conns++
			first := q.conns == 1
			q.mu.Unlock()
			if !first { // QEMU takes one incoming stream
				c.Close()
				continue
			}
			go func() {
				h := sha256.New()
				n, _ := io.Copy(h, c)
				q.mu.Lock()
				q.n = n
				copy(q.sum[:], h.Sum(nil))
				q.mu.Unlock()
				c.Close()
				close(q.done)
			}()
		}
	}()
	return q
}

func (q *targetQEMU) connections() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.conns
}

// node is one simulated node (podcontroltest.Node) whose agent runs this package's executor.
type node struct{ *podcontroltest.Node }

func newNode(t *testing.T, name string) *node {
	t.Helper()
	agentNamespaceExists(t)
	return &node{podcontroltest.NewNode(t, name)}
}

// start runs the node's agent until the test ends or the returned stop is called; an agent
// that ends with an error fails the test.
func (n *node) start(t *testing.T) (*Executor, func()) {
	t.Helper()
	a := n.Agent(t, env)
	a.Log = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Named(n.Name)
	e := &Executor{Agent: a, Namespace: agentNamespace, PodIP: "127.0.0.1", Listen: "127.0.0.1:0", Poll: 50 * time.Millisecond, Report: reportEvery}
	run := podcontroltest.Run(t, e.Run)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if err := run(); err != nil {
				t.Errorf("agent of %s: %v", n.Name, err)
			}
		})
	}
	t.Cleanup(stop)
	return e, stop
}

// agentNamespaceExists makes the agents' namespace before any agent starts (newNode): an
// agent's first step is its Secret there (CI once saw the first test's agent start before the
// namespace, which namespace(t) used to make).
func agentNamespaceExists(t *testing.T) {
	t.Helper()
	err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func namespace(t *testing.T) string { return podcontroltest.Namespace(t, env.Client, "migrate-") }

// runnerPod creates a running runner pod on node with extra labels and annotations, controlled
// by a VirtualMachine of the same name whose status names it, as the controller makes them.
func runnerPod(t *testing.T, ns, name, node string, labels, annotations map[string]string) *corev1.Pod {
	t.Helper()
	vm := podcontroltest.VM(t, env.Client, ns, name)
	pod := podOf(t, vm, ns, name, node, labels, annotations)
	podcontroltest.Name(t, env.Client, vm, pod)
	return pod
}

// podOf creates a running runner pod on node controlled by vm (nil: by nothing), which its
// status does not name.
func podOf(t *testing.T, vm *vmv1.VirtualMachine, ns, name, node string, labels, annotations map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	l := map[string]string{vmv1.LabelManagedBy: vmv1.ManagedBy}
	for k, v := range labels {
		l[k] = v
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l, Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: vmv1.RunnerContainer, Image: "runner"}}}}
	if vm != nil {
		podcontroltest.Own(pod, vm)
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	running(t, pod, "")
	return pod
}

// running writes the pod's status Running, with ip when set.
func running(t *testing.T, pod *corev1.Pod, ip string) {
	t.Helper()
	kubeapi.Eventually(t, "pod running", 10*time.Second, func() error {
		p := &corev1.Pod{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
			return err
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning}
		if ip != "" {
			p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		}
		return env.Client.Status().Update(context.Background(), p)
	})
}

// newMigration creates a VirtualMachineMigration of vm whose status names its source and
// target pods, as the migration controller writes it before it creates the target.
func newMigration(t *testing.T, vm *vmv1.VirtualMachine, source, target string) *vmv1.VirtualMachineMigration {
	t.Helper()
	ctx := context.Background()
	mig := &vmv1.VirtualMachineMigration{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, GenerateName: vm.Name + "-"},
		Spec: vmv1.VirtualMachineMigrationSpec{VMName: vm.Name}}
	if err := env.Client.Create(ctx, mig); err != nil {
		t.Fatal(err)
	}
	mig.Status = vmv1.VirtualMachineMigrationStatus{Phase: vmv1.MigrationScheduling, SourcePod: source, TargetPod: target}
	if err := env.Client.Status().Update(ctx, mig); err != nil {
		t.Fatal(err)
	}
	return mig
}

// targetPod creates mig's target pod as the controller does: vm's, labelled a target, the
// migration's UID in its annotation.
func targetPod(t *testing.T, vm *vmv1.VirtualMachine, mig *vmv1.VirtualMachineMigration, node string) *corev1.Pod {
	return podOf(t, vm, vm.Namespace, mig.Status.TargetPod, node, map[string]string{vmv1.LabelMigrationRole: vmv1.MigrationRoleTarget},
		map[string]string{vmv1.AnnotationMigration: string(mig.UID)})
}

// agentPod is node n's agent pod in the agents' namespace, as the DaemonSet makes it, with
// the receiver at addr (what its agent wrote as migration-receiver).
func agentPod(t *testing.T, n *node, addr string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: "virtpod-agent-" + n.Name, Labels: map[string]string{AgentLabel: AgentName}},
		Spec: corev1.PodSpec{NodeName: n.Name, Containers: []corev1.Container{{Name: "agent", Image: "runner",
			Ports: []corev1.ContainerPort{{Name: AgentPortName, ContainerPort: int32(p), Protocol: corev1.ProtocolTCP}}}}}}
	if err := env.Client.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod) })
	running(t, pod, host)
}

// annotate merge-patches annotations; a nil value removes one.
func annotate(t *testing.T, pod *corev1.Pod, kv map[string]any) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": kv}})
	if err := env.Client.Patch(context.Background(), pod, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
}

// annotation waits until the pod's annotation key passes ok and returns it.
func annotation(t *testing.T, pod *corev1.Pod, key string, timeout time.Duration, ok func(string) error) string {
	t.Helper()
	var v string
	kubeapi.Eventually(t, key+" on "+pod.Name, timeout, func() error {
		p := &corev1.Pod{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
			return err
		}
		v = p.Annotations[key]
		return ok(v)
	})
	return v
}

// stateIs waits for the pod's migration-state to have state and returns it.
func stateIs(t *testing.T, pod *corev1.Pod, state string, timeout time.Duration) controlapi.MigrationStatus {
	t.Helper()
	var st controlapi.MigrationStatus
	annotation(t, pod, vmv1.AnnotationMigrationState, timeout, func(v string) error {
		st = controlapi.MigrationStatus{}
		if err := json.Unmarshal([]byte(v), &st); err != nil || st.State != state {
			return fmt.Errorf("migration-state %q, want state %s", v, state)
		}
		return nil
	})
	return st
}
