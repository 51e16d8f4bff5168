package snapshot_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/manager"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// The whole controller manager against a real API server; the tests play the scheduler, the
// kubelets (pod status) and the node agent (the snapshot's result on the runner pod).

var (
	env     *kubeapi.Env
	clock   = kubeapi.NewClock()
	metrics = prometheus.NewRegistry()
)

func TestMain(m *testing.M) { kubeapi.Main(&withController{m}, &env) }

type withController struct{ m *testing.M }

func (w *withController) Run() int {
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := env.Client.Create(ctx, kubeapi.DefaultProviderClass()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgr, err := manager.New(env.Config, manager.Options{Pod: podspec.DefaultOptions(), Workers: 2, MetricsAddr: "0", Now: clock.Now, MetricsRegistry: metrics})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	return w.m.Run()
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	kubeapi.Eventually(t, what, 20*time.Second, check)
}

var ctx = context.Background()

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "snaptest-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// vmOnClaims creates a VM whose root disk and data disk "data" are on bound claims (and a
// read-only disk on a third, which no snapshot copies).
func vmOnClaims(t *testing.T, ns, name string, strategy vmv1.RunStrategy) *vmv1.VirtualMachine {
	t.Helper()
	for _, c := range []string{name + "-root", name + "-data", name + "-ro"} {
		if err := kubeapi.BoundClaim(ctx, env.Client, ns, c); err != nil {
			t.Fatal(err)
		}
	}
	vm := kubeapi.SampleVM(ns, name)
	vm.Spec.RunStrategy = strategy
	vm.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: name + "-root"}
	vm.Spec.Guest.Disks = []vmv1.Disk{
		{Name: "data", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: name + "-data"}},
		{Name: "ro", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: name + "-ro", ReadOnly: true}},
	}
	if err := env.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	return vm
}

// running plays the VM's runner pod onto node, started, and returns it.
func running(t *testing.T, vm *vmv1.VirtualMachine, node string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, "runner pod", func() (err error) { pod, err = getPod(vm.Namespace, podspec.PodName(vm.Name)); return err })
	env.Bind(t, pod, node)
	env.Kubelet(t, pod, kubeapi.RunnerStarted("10.244.0.7"))
	eventually(t, "VM running", func() error {
		if got := get(t, vm); got.Status.Phase != vmv1.PhaseRunning {
			return fmt.Errorf("phase %s", got.Status.Phase)
		}
		return nil
	})
	pod, _ = getPod(vm.Namespace, pod.Name)
	return pod
}

func getPod(ns, name string) (*corev1.Pod, error) {
	p := &corev1.Pod{}
	return p, env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p)
}

// get reads o's current state into a new object of its kind.
func get[T client.Object](t *testing.T, o T) T {
	t.Helper()
	out := o.DeepCopyObject().(T)
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), out); err != nil {
		t.Fatal(err)
	}
	return out
}

func snapshot(t *testing.T, ns, name, vm string) *vmv1.VirtualMachineSnapshot {
	t.Helper()
	s := &vmv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: vmv1.VirtualMachineSnapshotSpec{VMName: vm}}
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func restore(t *testing.T, ns, name, snap, vm string) *vmv1.VirtualMachineRestore {
	t.Helper()
	r := &vmv1.VirtualMachineRestore{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: vmv1.VirtualMachineRestoreSpec{SnapshotName: snap, VMName: vm}}
	if err := env.Client.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	return r
}

// phase waits for the object's phase and Ready reason.
func phase[T client.Object](t *testing.T, o T, want vmv1.SnapshotPhase, reason string, status func(T) (vmv1.SnapshotPhase, []metav1.Condition)) T {
	t.Helper()
	var got T
	eventually(t, fmt.Sprintf("%s %s/%s", o.GetName(), want, reason), func() error {
		got = get(t, o)
		p, conds := status(got)
		c := meta.FindStatusCondition(conds, vmv1.ConditionReady)
		if p != want || c == nil || c.Reason != reason {
			return fmt.Errorf("phase %s, Ready %+v", p, c)
		}
		return nil
	})
	return got
}

func snapPhase(s *vmv1.VirtualMachineSnapshot) (vmv1.SnapshotPhase, []metav1.Condition) {
	return s.Status.Phase, s.Status.Conditions
}

func restorePhase(r *vmv1.VirtualMachineRestore) (vmv1.SnapshotPhase, []metav1.Condition) {
	return r.Status.Phase, r.Status.Conditions
}

// copier waits for the named copier pod and plays it onto node, running.
func copier(t *testing.T, ns, name, node string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, "copier pod "+name, func() (err error) { pod, err = getPod(ns, name); return err })
	env.Bind(t, pod, node)
	env.Kubelet(t, pod, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning })
	return pod
}

// ends plays the copier's end: exit 0, or exit 1 with msg.
func ends(t *testing.T, pod *corev1.Pod, msg string) {
	t.Helper()
	env.Kubelet(t, pod, func(s *corev1.PodStatus) {
		s.Phase, s.ContainerStatuses = corev1.PodSucceeded, nil
		if msg != "" {
			s.Phase = corev1.PodFailed
			s.ContainerStatuses = []corev1.ContainerStatus{{Name: "copier", State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: msg}}}}
		}
	})
}

// answer plays the node agent's result on the runner pod.
func answer(t *testing.T, pod *corev1.Pod, res controlapi.SnapshotResult) {
	t.Helper()
	raw, _ := json.Marshal(res)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := getPod(pod.Namespace, pod.Name)
		if err != nil {
			return err
		}
		p.Annotations[vmv1.AnnotationSnapshotResult] = string(raw)
		return env.Client.Update(ctx, p)
	}); err != nil {
		t.Fatal(err)
	}
}

// deleted waits until the object is gone or being deleted (a claim keeps its protection
// finalizer: envtest runs no controller to remove it).
func deleted(t *testing.T, o client.Object) {
	t.Helper()
	eventually(t, o.GetName()+" deleted", func() error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o)
		if apierrors.IsNotFound(err) || err == nil && o.GetDeletionTimestamp() != nil {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

func claim(ns, name string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

func ownedBy(o metav1.Object, uid types.UID) bool {
	return slices.ContainsFunc(o.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == uid })
}

func argsHave(pod *corev1.Pod, want ...string) error {
	args := strings.Join(pod.Spec.Containers[0].Args, " ")
	for _, w := range want {
		if !strings.Contains(args, w) {
			return fmt.Errorf("copier args %q lack %q", args, w)
		}
	}
	return nil
}

// counted is the value of a counter of the controller's metrics, with the labels given.
func counted(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
