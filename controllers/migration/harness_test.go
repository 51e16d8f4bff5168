package migration_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/manager"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// The whole controller manager (VM and migration controllers) against a real API server. The
// tests play the scheduler, the kubelets (pod status) and the node agents (their annotations).

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
	qemu := kubeapi.DefaultProviderClass()
	if err := env.Client.Create(ctx, qemu); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := env.InstallAdmission(ctx); err != nil {
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

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "migtest-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// node registers a Ready node named after the test, deleted after it.
func node(t *testing.T, suffix string) string { return env.TestNode(t, suffix) }

func getPod(ns, name string) (*corev1.Pod, error) {
	p := &corev1.Pod{}
	return p, env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, p)
}

func getVM(t *testing.T, vm *vmv1.VirtualMachine) *vmv1.VirtualMachine {
	t.Helper()
	out := &vmv1.VirtualMachine{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(vm), out); err != nil {
		t.Fatal(err)
	}
	return out
}

// started is the kubelet's status of a runner whose startup probe passed (the guest runs).
var started = kubeapi.RunnerStarted

// waiting is a target runner up and waiting for its stream: running, not started.
var waiting = kubeapi.RunnerWaiting

func failedPod(s *corev1.PodStatus) {
	s.Phase = corev1.PodFailed
	s.ContainerStatuses = []corev1.ContainerStatus{{Name: vmv1.RunnerContainer, State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "incoming migration failed: connection reset"}}}}
}

// runningVM creates a migratable VM (mutate may make it otherwise) and plays its runner pod onto
// a node, started; it returns the VM as running and its pod.
func runningVM(t *testing.T, ns, name, nodeName string, mutate func(*vmv1.VirtualMachine)) (*vmv1.VirtualMachine, *corev1.Pod) {
	t.Helper()
	vm := kubeapi.SampleVM(ns, name)
	vm.Spec.Guest.NetworkMode = vmv1.NetworkMasquerade
	if mutate != nil {
		mutate(vm)
	}
	if err := env.Client.Create(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	eventually(t, "runner pod", func() (err error) { pod, err = getPod(ns, podspec.PodName(name)); return err })
	env.Bind(t, pod, nodeName)
	env.Kubelet(t, pod, started("10.244.0.7"))
	eventually(t, "VM running", func() error {
		if got := getVM(t, vm); got.Status.Phase != vmv1.PhaseRunning || meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionMigratable) == nil {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
	pod, _ = getPod(ns, pod.Name)
	return getVM(t, vm), pod
}

func migrate(t *testing.T, vm *vmv1.VirtualMachine, name string, mutate func(*vmv1.VirtualMachineMigration)) *vmv1.VirtualMachineMigration {
	t.Helper()
	mig := &vmv1.VirtualMachineMigration{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: name}, Spec: vmv1.VirtualMachineMigrationSpec{VMName: vm.Name}}
	if mutate != nil {
		mutate(mig)
	}
	if err := env.Client.Create(context.Background(), mig); err != nil {
		t.Fatal(err)
	}
	return mig
}

func getMig(t *testing.T, mig *vmv1.VirtualMachineMigration) *vmv1.VirtualMachineMigration {
	t.Helper()
	out := &vmv1.VirtualMachineMigration{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(mig), out); err != nil {
		t.Fatal(err)
	}
	return out
}

// ended waits for the migration's phase and Completed reason, and returns it.
func ended(t *testing.T, mig *vmv1.VirtualMachineMigration, phase vmv1.MigrationPhase, reason string) *vmv1.VirtualMachineMigration {
	t.Helper()
	var got *vmv1.VirtualMachineMigration
	eventually(t, fmt.Sprintf("migration %s/%s", phase, reason), func() error {
		got = getMig(t, mig)
		c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionCompleted)
		if got.Status.Phase != phase || c == nil || c.Reason != reason {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
	return got
}

// target waits for the migration's target pod.
func target(t *testing.T, mig *vmv1.VirtualMachineMigration) *corev1.Pod {
	t.Helper()
	name := podspec.TargetPodName(mig.Spec.VMName, getMig(t, mig).UID)
	var pod *corev1.Pod
	eventually(t, "target pod "+name, func() (err error) {
		if pod, err = getPod(mig.Namespace, name); err != nil {
			// The migration's status says why there is none (a refusal, or a step not taken).
			return fmt.Errorf("%w; migration status %+v", err, getMig(t, mig).Status)
		}
		return nil
	})
	return pod
}

// annotate sets (or, with "", removes) pod annotations as a node agent does.
func annotate(t *testing.T, pod *corev1.Pod, kv ...string) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := getPod(pod.Namespace, pod.Name)
		if err != nil {
			return err
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(p.Annotations, kv[i])
			} else {
				p.Annotations[kv[i]] = kv[i+1]
			}
		}
		return env.Client.Update(context.Background(), p)
	}); err != nil {
		t.Fatal(err)
	}
}

// state is the source agent's report of the runner's migration status.
func state(t *testing.T, source *corev1.Pod, st string, transferred, total, downtimeMs int64, errText string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"role": "source", "state": st, "transferredBytes": transferred, "totalBytes": total,
		"remainingBytes": total - transferred, "downtimeMs": downtimeMs, "error": errText})
	annotate(t, source, vmv1.AnnotationMigrationState, string(b))
}

// gone waits until the pod is deleted or being deleted (a bound pod waits for its kubelet).
func gone(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, "pod "+name+" deleted", func() error {
		p, err := getPod(ns, name)
		if apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil {
			return nil
		}
		return fmt.Errorf("pod %s still there (%v)", name, err)
	})
}

// unmarked waits until the pod carries none of the controller's migration annotations (the
// agent's last report may stay: it is read only while migrate-to is set).
func unmarked(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	eventually(t, "pod "+pod.Name+" unmarked", func() (err error) {
		if p, err = getPod(pod.Namespace, pod.Name); err != nil {
			return err
		}
		for _, k := range []string{vmv1.AnnotationMigration, vmv1.AnnotationMigrateTo} {
			if v, ok := p.Annotations[k]; ok {
				return fmt.Errorf("%s=%s still set", k, v)
			}
		}
		return nil
	})
	return p
}

// sending plays the target node's agent (receiver annotation) and waits for the controller to
// tell the source to send.
func sending(t *testing.T, source, tgt *corev1.Pod) {
	t.Helper()
	annotate(t, tgt, vmv1.AnnotationMigrationReceiver, "10.1.0.2:9440")
	eventually(t, "migrate-to on the source", func() error {
		p, err := getPod(source.Namespace, source.Name)
		if err != nil {
			return err
		}
		if want := "10.1.0.2:9440/" + string(tgt.UID); p.Annotations[vmv1.AnnotationMigrateTo] != want {
			return fmt.Errorf("migrate-to %q, want %q", p.Annotations[vmv1.AnnotationMigrateTo], want)
		}
		return nil
	})
}

func counter(t *testing.T, name string, labels map[string]string) float64 {
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
			if m.GetCounter() != nil {
				sum += m.GetCounter().GetValue()
			}
			if m.GetHistogram() != nil {
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

func resourceQ(s string) resource.Quantity { return resource.MustParse(s) }
