// Package faults tests the controller under faults: the real virtpod-controller binary, a
// process of its own, against a real kube-apiserver and etcd, killed at random moments, cut off
// by a control-plane restart, and watching nodes disappear under kube-controller-manager's own
// node lifecycle, taint eviction and pod garbage collection. Pods are placed and reported
// running by simulated nodes (kubeapi.Kubelets).
package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var (
	env           *kubeapi.Env
	controllerBin string
)

func TestMain(m *testing.M) { kubeapi.Main(setupPackage{m}, &env) }

type setupPackage struct{ m *testing.M }

// Run builds the controller binary once and creates the default ProviderClass, as
// config/providers ships it (with emulation, as config/local allows it).
func (s setupPackage) Run() int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	dir, err := os.MkdirTemp("", "virtpod-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	controllerBin = filepath.Join(dir, "virtpod-controller")
	if out, err := exec.Command("go", "build", "-o", controllerBin, "github.com/virtpod/virtpod/cmd/virtpod-controller").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the controller: %v\n%s", err, out)
		return 1
	}
	qemu := kubeapi.DefaultProviderClass()
	if err := env.Client.Create(context.Background(), qemu); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return s.m.Run()
}

// scene is one test's namespace, simulated nodes, and a count of the pods made and removed in it.
type scene struct {
	ns         string
	kubeconfig string
	logPath    string
	kubelets   *kubeapi.Kubelets
	mu         sync.Mutex
	added      int
	deleted    int
}

// newScene makes the namespace and nodes and starts the simulated kubelets, scheduling onto
// the nodes given. Everything is removed after the test, so the next one starts clean.
func newScene(t testing.TB, nodes ...string) *scene {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "faults-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig, err := env.Kubeconfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := &scene{ns: ns.Name, kubeconfig: kubeconfig, logPath: filepath.Join(dir, "controller.log")}
	t.Cleanup(func() {
		cancel()
		if t.Failed() {
			b, _ := os.ReadFile(s.logPath)
			t.Logf("controller log (last 4 KiB):\n%s", tail(string(b), 4096))
		}
		bg := context.Background()
		_ = env.Client.DeleteAllOf(bg, &vmv1.VirtualMachine{}, client.InNamespace(s.ns))
		_ = env.Client.DeleteAllOf(bg, &corev1.Pod{}, client.InNamespace(s.ns), client.GracePeriodSeconds(0))
		for _, n := range nodes {
			_ = env.Client.Delete(bg, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
	})
	for _, n := range nodes {
		if err := kubeapi.CreateNode(ctx, env.Client, n); err != nil {
			t.Fatal(err)
		}
	}
	if s.kubelets, err = kubeapi.StartKubelets(ctx, env.Config, s.ns, nodes...); err != nil {
		t.Fatal(err)
	}
	s.countPods(t, ctx)
	return s
}

// countPods counts the distinct runner pods (by UID) made and removed in the namespace. An
// informer re-lists after a control-plane restart, when the API server's new watch cache cannot
// resume the old watch: a pod replaced meanwhile still shows, as a new UID.
func (s *scene) countPods(t testing.TB, ctx context.Context) {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	made, gone := map[types.UID]bool{}, map[types.UID]bool{}
	record := func(add, del *corev1.Pod) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if add != nil {
			made[add.UID] = true
		}
		if del != nil && (add == nil || del.UID != add.UID) {
			gone[del.UID] = true
		}
		s.added, s.deleted = len(made), len(gone)
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(s.ns))
	if _, err := f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { record(o.(*corev1.Pod), nil) },
		UpdateFunc: func(o, n any) { record(n.(*corev1.Pod), o.(*corev1.Pod)) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			record(nil, o.(*corev1.Pod))
		},
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
}

func (s *scene) podCounts() (added, deleted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.added, s.deleted
}

// wantPodCounts waits for the watch to catch up, then checks the pods made and removed.
func (s *scene) wantPodCounts(t *testing.T, added, deleted int) {
	t.Helper()
	kubeapi.Eventually(t, "pod events seen", 30*time.Second, func() error {
		if a, d := s.podCounts(); a < added || d < deleted {
			return fmt.Errorf("%d pods created and %d removed so far", a, d)
		}
		return nil
	})
	if a, d := s.podCounts(); a != added || d != deleted {
		t.Fatalf("%d runner pods created and %d removed, want %d and %d", a, d, added, deleted)
	}
}

// controller is one run of the virtpod-controller binary.
type controller struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// startController starts the binary as a Deployment would run it, without leader election:
// a SIGKILLed leader would hold its lease for 15 s, and only one runs at a time here.
func (s *scene) startController(t testing.TB) *controller {
	t.Helper()
	return s.startProcess(t, "--leader-elect=false")
}

// replica is a controller run as the Deployment's pod is: when its process exits on its own (a
// replica that loses its lease stops leading by exiting, and a starved machine can make it lose
// one), it is started again, as the kubelet restarts the container. Exits the test causes
// (kill, stop) are not restarted: the test plays the Deployment's own moves.
type replica struct {
	mu       sync.Mutex
	current  *controller
	ended    bool // the test ended it
	restarts []string
}

// startReplica starts a supervised replica with the scene's settings and args.
func (s *scene) startReplica(t testing.TB, args ...string) *replica {
	t.Helper()
	r := &replica{current: s.startProcess(t, args...)}
	go func() {
		for {
			r.mu.Lock()
			c := r.current
			r.mu.Unlock()
			<-c.exited
			r.mu.Lock()
			if r.ended {
				r.mu.Unlock()
				return
			}
			r.restarts = append(r.restarts, fmt.Sprintf("%s (%s)", time.Now().Format("15:04:05.000"), c.cmd.ProcessState))
			r.current = s.startProcess(t, args...)
			r.mu.Unlock()
		}
	}()
	t.Cleanup(r.kill)
	return r
}

// kill SIGKILLs the replica, and it stays down.
func (r *replica) kill() { r.end().kill() }

// stop ends the replica as a rollout does (SIGTERM), waits for it, and it stays down.
func (r *replica) stop() { r.end().stop() }

func (r *replica) end() *controller {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = true
	return r.current
}

// Restarts are the times the replica exited on its own and was started again.
func (r *replica) Restarts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.restarts...)
}

// startProcess runs the controller binary with the scene's settings and args.
func (s *scene) startProcess(t testing.TB, args ...string) *controller {
	t.Helper()
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(controllerBin, append([]string{"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--workers=4", "--zap-log-level=error"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // gone with a test binary that panics
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &controller{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = log.Close(); close(c.exited) }()
	t.Cleanup(c.kill)
	return c
}

func (c *controller) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
}

// stop asks the controller to end, as the kubelet does (SIGTERM), and waits until it has.
func (c *controller) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	<-c.exited
}

func (c *controller) alive() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// createVM creates a VM, retrying while the API server is away; a create whose answer was lost
// shows up as AlreadyExists. It gives up, quietly, when ctx ends.
func (s *scene) createVM(ctx context.Context, t testing.TB, name string, edit func(*vmv1.VirtualMachine)) bool {
	deadline := time.Now().Add(time.Minute)
	for ctx.Err() == nil {
		vm := kubeapi.SampleVM(s.ns, name)
		if edit != nil {
			edit(vm)
		}
		err := env.Client.Create(ctx, vm)
		if err == nil || apierrors.IsAlreadyExists(err) {
			return true
		}
		if time.Now().After(deadline) {
			t.Errorf("creating VM %s: %v", name, err)
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// converged waits until each of the n VMs runs in exactly its own runner pod, which its status
// names, with the restarts given (none unless listed), and no pod is left without its VM.
func (s *scene) converged(t *testing.T, n int, timeout time.Duration, restarts map[string]int32) {
	t.Helper()
	ctx := context.Background()
	kubeapi.Eventually(t, fmt.Sprintf("%d VMs running, one pod each", n), timeout, func() error {
		vms := &vmv1.VirtualMachineList{}
		if err := env.Client.List(ctx, vms, client.InNamespace(s.ns)); err != nil {
			return err
		}
		pods := &corev1.PodList{}
		if err := env.Client.List(ctx, pods, client.InNamespace(s.ns)); err != nil {
			return err
		}
		byName := map[string]*corev1.Pod{}
		for i := range pods.Items {
			byName[pods.Items[i].Name] = &pods.Items[i]
		}
		if len(vms.Items) != n || len(pods.Items) != n {
			return fmt.Errorf("%d VMs and %d pods, want %d of each; %s", len(vms.Items), len(pods.Items), n, withoutPods(vms.Items, byName))
		}
		for i := range vms.Items {
			vm := &vms.Items[i]
			pod := byName[podspec.PodName(vm.Name)]
			if pod == nil {
				return fmt.Errorf("VM %s has no pod", vm.Name)
			}
			if !metav1.IsControlledBy(pod, vm) {
				return fmt.Errorf("pod %s is not controlled by VM %s: %+v", pod.Name, vm.Name, pod.OwnerReferences)
			}
			if err := running(vm, pod, restarts[vm.Name]); err != nil {
				return err
			}
		}
		return nil
	})
}

// withoutPods says how many VMs have no pod by their phases, and what the first few say: what a
// failed convergence needs to tell a stuck controller from a slow one.
func withoutPods(vms []vmv1.VirtualMachine, pods map[string]*corev1.Pod) string {
	phases, first := map[vmv1.Phase]int{}, []string{}
	for i := range vms {
		vm := &vms[i]
		if pods[podspec.PodName(vm.Name)] != nil {
			continue
		}
		phases[vm.Status.Phase]++
		if len(first) < 3 {
			ready := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionReady)
			first = append(first, fmt.Sprintf("%s (podUID %q, restartCount %d, Ready %+v)", vm.Name, vm.Status.PodUID, vm.Status.RestartCount, ready))
		}
	}
	return fmt.Sprintf("VMs without a pod by phase: %v; first: %s", phases, strings.Join(first, ", "))
}

func running(vm *vmv1.VirtualMachine, pod *corev1.Pod, restarts int32) error {
	st := vm.Status
	ready := meta.FindStatusCondition(st.Conditions, vmv1.ConditionReady)
	switch {
	case st.RestartCount != restarts:
		return fmt.Errorf("VM %s: restartCount %d, want %d (last termination %+v)", vm.Name, st.RestartCount, restarts, st.LastTermination)
	case st.PodUID != string(pod.UID):
		return fmt.Errorf("VM %s: status names pod %q, the pod is %s (made for restart %s, phase %s, deleting %v); VM phase %s, restartCount %d, Ready %+v",
			vm.Name, st.PodUID, pod.UID, pod.Annotations["vm.virtpod.io/restart-count"], pod.Status.Phase, pod.DeletionTimestamp != nil, st.Phase, st.RestartCount, ready)
	case st.Phase != vmv1.PhaseRunning || ready == nil || ready.Status != metav1.ConditionTrue || st.Node != pod.Spec.NodeName || st.PodIP == "":
		return fmt.Errorf("VM %s: phase %s on %q, Ready %+v", vm.Name, st.Phase, st.Node, ready)
	case st.ObservedGeneration != vm.Generation:
		return fmt.Errorf("VM %s: observedGeneration %d of %d", vm.Name, st.ObservedGeneration, vm.Generation)
	}
	return nil
}

func getVM(t *testing.T, ns, name string) *vmv1.VirtualMachine {
	t.Helper()
	vm := &vmv1.VirtualMachine{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, vm); err != nil {
		t.Fatal(err)
	}
	return vm
}

func getPod(ns, vm string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: podspec.PodName(vm)}, pod)
	return pod, err
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[strings.IndexByte(s[len(s)-n:], '\n')+len(s)-n+1:]
	}
	return s
}

// faultSeed seeds a test's kill schedule: VIRTPOD_FAULT_SEED replays a logged run's, else a new
// one, logged.
func faultSeed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("VIRTPOD_FAULT_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("VIRTPOD_FAULT_SEED: %v", err)
		}
	}
	t.Logf("seed %d (replay the kill schedule with VIRTPOD_FAULT_SEED=%d)", seed, seed)
	return seed
}
