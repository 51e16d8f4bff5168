package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/capimanager"
	"github.com/virtpod/virtpod/tests/kubeapi"
	"github.com/virtpod/virtpod/tests/prereq"
)

// TestNodeLoss runs kube-controller-manager with only the controllers that act on lost nodes:
// node lifecycle (marks a silent node NotReady and taints it), taint eviction and pod garbage
// collection (PodGC). Node "lost" is deleted, as an admin or a cloud provider does with a dead
// machine; node "cut" stops reporting but keeps its Node object, as in a network partition.
//
//   - On the deleted node, PodGC removes the pods (after its 40 s quarantine); the VM with
//     runStrategy Always starts on another node, the one with Once ends Failed.
//   - On the partitioned node the guest may still run, so its pod must stay: the taint manager
//     evicts it, nothing can confirm the stop, and it sits Terminating. virtpod does not
//     force-delete it (no second copy of the guest) and says so, with what an admin can do;
//     once the admin taints the node out-of-service, PodGC removes the pod and the VM starts
//     elsewhere.
func TestNodeLoss(t *testing.T) {
	kcm := kcmBinary(t)
	ctx := context.Background()
	s := newScene(t, "good", "lost", "cut")
	beats := heartbeat(t, "good", "lost", "cut")
	startKCM(t, kcm, s.kubeconfig, "node-lifecycle-controller,taint-eviction-controller,pod-garbage-collector-controller",
		"--node-monitor-period=1s", "--node-monitor-grace-period=4s")
	s.startController(t)

	// The pods go where the test wants them: two on "lost", one on "cut".
	s.kubelets.Schedule("lost")
	s.createVM(ctx, t, "on-lost", nil)
	s.createVM(ctx, t, "once", func(vm *vmv1.VirtualMachine) { vm.Spec.RunStrategy = vmv1.RunOnce })
	waitRunning(t, s.ns, "on-lost", "lost", 0)
	waitRunning(t, s.ns, "once", "lost", 0)
	s.kubelets.Schedule("cut")
	// Evicted a second after its node is unreachable, rather than the default 5 minutes.
	s.createVM(ctx, t, "on-cut", func(vm *vmv1.VirtualMachine) {
		vm.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](1)}}
	})
	cutPod := waitRunning(t, s.ns, "on-cut", "cut", 0)
	s.kubelets.Schedule("good")

	lost := time.Now()
	s.kubelets.Cut("lost")
	s.kubelets.Cut("cut")
	beats.stop("lost", "cut")
	if err := env.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lost"}}); err != nil {
		t.Fatal(err)
	}
	vmCondition(t, s.ns, "on-lost", "NodeDeleted", "node lost was deleted; Kubernetes removes runner pod on-lost-runner")

	// The partitioned node's pod is evicted and stays Terminating; the VM says why and what to do.
	kubeapi.Eventually(t, "on-cut's pod evicted and the VM telling why", time.Minute, func() error {
		vm := getVM(t, s.ns, "on-cut")
		c := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionReady)
		if vm.Status.Phase != vmv1.PhaseStopping || c == nil || c.Reason != "NodeNotReady" {
			return fmt.Errorf("phase %s, Ready %+v", vm.Status.Phase, c)
		}
		return nil
	})
	c := meta.FindStatusCondition(getVM(t, s.ns, "on-cut").Status.Conditions, vmv1.ConditionReady)
	for _, want := range []string{"node cut is not ready (Ready=Unknown", "no second copy starts while runner pod on-cut-runner exists",
		"kubectl taint node cut node.kubernetes.io/out-of-service=nodeshutdown:NoExecute", "the guest starts on another node (runStrategy Always)"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Ready message %q lacks %q", c.Message, want)
		}
	}
	// The status was written by a reconcile that saw the pod Terminating on a NotReady node: a
	// controller that force-deleted it would have done so already.
	if p, err := getPod(s.ns, "on-cut"); err != nil || p.UID != cutPod.UID || p.DeletionTimestamp == nil {
		t.Fatalf("the partitioned node's pod should stay, Terminating: %v", err)
	}
	t.Logf("on-cut: %s", c.Message)

	// The admin has made sure the machine is off: out-of-service lets PodGC remove the pod.
	tainted := time.Now()
	node := &corev1.Node{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "cut"}, node); err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	if err := env.Client.Update(ctx, node); err != nil {
		t.Fatal(err)
	}

	// PodGC checks every 20 s; the out-of-service taint lets it remove the pod at once.
	waitRunning(t, s.ns, "on-cut", "good", 1)
	t.Logf("on-cut running on node good %v after the out-of-service taint", time.Since(tainted).Round(time.Second))
	// PodGC waits 40 s before it believes a node is gone.
	waitRunning(t, s.ns, "on-lost", "good", 1)
	t.Logf("on-lost running on node good %v after its node was deleted", time.Since(lost).Round(time.Second))
	once := vmCondition(t, s.ns, "once", "RunnerFailed", "")
	if once.Status.Phase != vmv1.PhaseFailed || once.Status.RestartCount != 0 {
		t.Errorf("once: phase %s, %d restarts", once.Status.Phase, once.Status.RestartCount)
	}
	if _, err := getPod(s.ns, "once"); !apierrors.IsNotFound(err) {
		t.Errorf("once: a pod exists under runStrategy Once: %v", err)
	}
	// Whichever the controller saw first, PodGC failing the pod or deleting it, status says so.
	for _, name := range []string{"on-lost", "once", "on-cut"} {
		lt := getVM(t, s.ns, name).Status.LastTermination
		t.Logf("%s last termination: %+v", name, lt)
		if want := map[string]bool{"DeletionByPodGC": true, "RunnerPodDeleted": true}; lt == nil || !want[lt.Reason] {
			t.Errorf("%s: last termination %+v, want PodGC's or the pod's deletion", name, lt)
		}
	}
	// One pod each, and one more each for the two restarted.
	s.wantPodCounts(t, 3+2, 3)
}

// waitRunning waits for the VM to run on the node after the restarts given and returns its pod.
func waitRunning(t *testing.T, ns, name, node string, restarts int32) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	kubeapi.Eventually(t, name+" running on "+node, 2*time.Minute, func() error {
		vm := getVM(t, ns, name)
		p, err := getPod(ns, name)
		if err != nil {
			return err
		}
		if err := running(vm, p, restarts); err != nil || vm.Status.Node != node {
			return fmt.Errorf("on %q: %v", vm.Status.Node, err)
		}
		pod = p
		return nil
	})
	return pod
}

// vmCondition waits for the VM's Ready condition to have the reason and the message part.
func vmCondition(t *testing.T, ns, name, reason, msg string) *vmv1.VirtualMachine {
	t.Helper()
	var vm *vmv1.VirtualMachine
	kubeapi.Eventually(t, fmt.Sprintf("%s Ready reason %s", name, reason), 2*time.Minute, func() error {
		vm = getVM(t, ns, name)
		c := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionReady)
		if c == nil || c.Reason != reason || !strings.Contains(c.Message, msg) {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
	return vm
}

// heartbeats renews the nodes' Leases every second, as their kubelets do; stop silences some.
type heartbeats struct {
	mu    sync.Mutex
	alive map[string]bool
}

func heartbeat(t *testing.T, nodes ...string) *heartbeats {
	h := &heartbeats{alive: map[string]bool{}}
	for _, n := range nodes {
		h.alive[n] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			h.mu.Lock()
			var up []string
			for n, ok := range h.alive {
				if ok {
					up = append(up, n)
				}
			}
			h.mu.Unlock()
			for _, n := range up {
				renewLease(ctx, n)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return h
}

func (h *heartbeats) stop(nodes ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range nodes {
		h.alive[n] = false
	}
}

func renewLease(ctx context.Context, node string) {
	now := metav1.NewMicroTime(time.Now())
	l := &coordinationv1.Lease{}
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: node}, l)
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: node},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now}}
		_ = env.Client.Create(ctx, l)
		return
	}
	if err == nil {
		l.Spec.RenewTime = &now
		_ = env.Client.Update(ctx, l)
	}
}

// kcmBinary is kube-controller-manager's path: TEST_ASSET_KUBE_CONTROLLER_MANAGER, or beside
// kube-apiserver, where `make k8s-binaries` builds it.
func kcmBinary(t testing.TB) string {
	kcm := os.Getenv("TEST_ASSET_KUBE_CONTROLLER_MANAGER")
	if kcm == "" {
		kcm = filepath.Join(filepath.Dir(os.Getenv("TEST_ASSET_KUBE_APISERVER")), "kube-controller-manager")
	}
	_, err := os.Stat(kcm)
	prereq.Need(t, err == nil, fmt.Sprintf("kube-controller-manager (%s) missing: `make k8s-binaries` builds it", kcm))
	return kcm
}

// startKCM runs kube-controller-manager with the controllers given (--controllers) and flags,
// stopped after the test; its log is shown when the test failed.
func startKCM(t testing.TB, bin, kubeconfig, controllers string, flags ...string) {
	t.Helper()
	const name = "faults-kube-controller-manager"
	stop, err := capimanager.Run(name, kubeconfig, bin, append([]string{"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--secure-port=0",
		"--controllers=" + controllers}, flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			b, _ := os.ReadFile(capimanager.LogPath(name))
			t.Logf("kube-controller-manager log (last 4 KiB):\n%s", tail(string(b), 4096))
		}
	})
}
