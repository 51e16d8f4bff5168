package vm_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/manager"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var (
	env   *kubeapi.Env
	clock = kubeapi.NewClock()
)

// metrics is the test controller's registry.
var metrics = prometheus.NewRegistry()

// restartsCounted reads virtpod_vm_restarts_total from the test controller.
func restartsCounted(t *testing.T) float64 {
	t.Helper()
	families, err := metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "virtpod_vm_restarts_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no virtpod_vm_restarts_total")
	return 0
}

func TestMain(m *testing.M) {
	kubeapi.Main(&mainWithController{m}, &env)
}

// mainWithController starts one controller manager for the package's tests.
type mainWithController struct{ m *testing.M }

func (w *mainWithController) Run() int {
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The cluster's default class, as config/providers ships it (with emulation, and the runner
	// images VMs may name, as config/local allows them: here the image-map tests' runner).
	qemu := kubeapi.DefaultProviderClass()
	qemu.Spec.AllowedRunnerImages = []string{"localhost/imagemap/runner"}
	if err := env.Client.Create(ctx, qemu); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The admission policies as config/admission ships them: VMs get their provider as they are
	// created, the way a cluster runs them. (VIRTPOD_BENCH_ADMISSION=off measures a cluster
	// without them: the controller then writes each VM's default provider.)
	if os.Getenv("VIRTPOD_BENCH_ADMISSION") != "off" {
		if _, err := env.InstallAdmission(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if flag.Lookup("test.bench").Value.String() != "" {
		return w.m.Run() // benchmarks run the controller binary themselves
	}
	opts := manager.Options{Pod: podspec.DefaultOptions(), Workers: 4, MetricsAddr: "0", Now: clock.Now, ImageMap: imageMapKey, MetricsRegistry: metrics}
	mgr, err := manager.New(env.Config, opts)
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

func TestVMLifecycle(t *testing.T) {
	ns := namespace(t)
	vm := kubeapi.SampleVM(ns, "web")
	vm.Labels = map[string]string{"app": "web"}
	create(t, vm)

	pod := waitPod(t, vm, "")
	if !metav1.IsControlledBy(pod, vm) {
		t.Fatalf("runner pod is not controlled by its VM: %+v", pod.OwnerReferences)
	}
	if pod.Labels["app"] != "web" || pod.Labels[podspec.LabelVMName] != "web" || pod.Labels[podspec.LabelProvider] != "qemu" {
		t.Fatalf("runner pod labels: %v", pod.Labels)
	}
	got := condition(t, vm, vmv1.PhaseScheduling, vmv1.ConditionScheduled, metav1.ConditionFalse, "WaitingForScheduler")
	if got.Status.PodName != pod.Name || got.Status.ObservedGeneration != got.Generation {
		t.Fatalf("status: %+v", got.Status)
	}

	// The scheduler cannot place it: the scheduler's words reach the VM.
	kubelet(t, pod, func(s *corev1.PodStatus) {
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
			Message: "0/3 nodes are available: 3 Insufficient devices.virtpod.io/kvm."}}
	})
	got = condition(t, vm, vmv1.PhaseScheduling, vmv1.ConditionScheduled, metav1.ConditionFalse, "Unschedulable")
	if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionScheduled); !strings.Contains(c.Message, "Insufficient devices.virtpod.io/kvm") {
		t.Fatalf("scheduler message lost: %q", c.Message)
	}

	bind(t, pod, "node-a")
	got = condition(t, vm, vmv1.PhaseStarting, vmv1.ConditionScheduled, metav1.ConditionTrue, "Scheduled")
	if got.Status.Node != "node-a" {
		t.Fatalf("node: %q", got.Status.Node)
	}

	// An image that cannot be pulled is named while the VM starts.
	kubelet(t, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: vmv1.RunnerContainer, State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "virtpod/runner:latest"`}}}}
	})
	eventually(t, "image pull problem in the Ready condition", func() error {
		c := meta.FindStatusCondition(getVM(t, vm).Status.Conditions, vmv1.ConditionReady)
		if c == nil || !strings.Contains(c.Message, "ImagePullBackOff") {
			return fmt.Errorf("ready condition %+v", c)
		}
		return nil
	})

	kubelet(t, pod, running)
	got = condition(t, vm, vmv1.PhaseRunning, vmv1.ConditionReady, metav1.ConditionTrue, "GuestRunning")
	if got.Status.PodIP != "10.244.0.7" {
		t.Fatalf("pod IP: %q", got.Status.PodIP)
	}

	// Labels follow the VM, so Services selecting VMs by label keep working.
	got.Labels["tier"] = "frontend"
	delete(got.Labels, "app")
	if err := env.Client.Update(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod labels follow the VM", func() error {
		p, err := runnerPod(vm)
		if err != nil {
			return err
		}
		if p.Labels["tier"] != "frontend" || p.Labels["app"] != "" || p.Labels[podspec.LabelVMName] != "web" {
			return fmt.Errorf("labels %v", p.Labels)
		}
		return nil
	})
	waitEvent(t, vm, "Normal CreatedPod: Created runner pod web-runner")

	// The guest's agent, as the node agent reports it on the pod: its facts reach status.guest
	// through the real API server's validation, and go again when it stops answering. Only a
	// started guest (its startup probe passed) has any.
	kubelet(t, pod, func(s *corev1.PodStatus) { running(s); s.ContainerStatuses[0].Started = ptr.To(true) })
	condition(t, vm, vmv1.PhaseRunning, vmv1.ConditionAgentConnected, metav1.ConditionFalse, vmv1.ReasonAgentNotConnected)
	facts := func(v string) {
		t.Helper()
		p, err := runnerPod(vm)
		if err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(p.DeepCopy())
		p.Annotations[vmv1.AnnotationGuestFacts] = v
		if err := env.Client.Patch(context.Background(), p, patch); err != nil {
			t.Fatal(err)
		}
	}
	facts(`{"channel":true,"connected":true,"os":{"id":"debian","prettyName":"Debian GNU/Linux 12 (bookworm)","versionID":"12","kernelRelease":"6.1.0-40-cloud-amd64"},` +
		`"hostname":"web","interfaces":[{"name":"eth0","mac":"52:54:00:00:00:01","ips":["10.244.0.7/24","fe80::1/64"]}],` +
		`"bootstrap":{"cloudInitDone":true,"cloudInitErrors":["runcmd failed","` + strings.Repeat("x", 300) + `"]}}`)
	got = condition(t, vm, vmv1.PhaseRunning, vmv1.ConditionAgentConnected, metav1.ConditionTrue, vmv1.ReasonAgentConnected)
	if g := got.Status.Guest; g == nil || g.OS == nil || g.OS.VersionID != "12" || g.Hostname != "web" || len(g.Interfaces) != 1 || g.Interfaces[0].IPs[0] != "10.244.0.7/24" {
		t.Fatalf("status.guest %+v", got.Status.Guest)
	}
	// What the bootstrap left, bounded as the API server's schema asks (an error of 300
	// characters is cut at 256, not refused with the whole status).
	if b := got.Status.Guest.Bootstrap; b == nil || b.Sentinel || !b.CloudInitDone || len(b.CloudInitErrors) != 2 || len(b.CloudInitErrors[1]) != 256 {
		t.Fatalf("status.guest.bootstrap %+v", got.Status.Guest.Bootstrap)
	}
	facts(`{"channel":true}`)
	got = condition(t, vm, vmv1.PhaseRunning, vmv1.ConditionAgentConnected, metav1.ConditionFalse, vmv1.ReasonAgentNotConnected)
	if g := got.Status.Guest; g == nil || g.OS != nil || g.Hostname != "" || g.Interfaces != nil {
		t.Fatalf("status.guest %+v after the agent went", got.Status.Guest)
	}
}

func TestRunStrategyAlways(t *testing.T) {
	restarts := restartsCounted(t)
	ns := namespace(t)
	created := podCreations(t, ns)
	vm := create(t, kubeapi.SampleVM(ns, "always"))
	t.Cleanup(func() {
		if t.Failed() { // what a flake needs to be understood
			p, err := runnerPod(vm)
			if err == nil {
				t.Logf("runner pod %s: annotations %v, node %q, phase %s, created %s", p.UID, p.Annotations, p.Spec.NodeName, p.Status.Phase, p.CreationTimestamp.UTC().Format(time.RFC3339))
			}
			got := getVM(t, vm)
			st, _ := json.Marshal(got.Status)
			t.Logf("the test clock: %s; the VM at resourceVersion %s: %s", clock.Now().UTC().Format(time.RFC3339Nano), got.ResourceVersion, st)
			t.Logf("the VM's events, with when each was made:\n%s", timedEvents(t, vm))
		}
	})
	pod := waitPod(t, vm, "")
	bind(t, pod, "node-a")
	kubelet(t, pod, running)
	condition(t, vm, vmv1.PhaseRunning, vmv1.ConditionReady, metav1.ConditionTrue, "GuestRunning")

	kubelet(t, pod, ended(1, "Error", "qemu-system-x86_64 was killed by signal 9"))
	second := waitPod(t, vm, pod.UID)
	if second.Name != pod.Name {
		t.Fatalf("the replacement pod has another name: %s", second.Name)
	}
	got := condition(t, vm, vmv1.PhaseScheduling, vmv1.ConditionScheduled, metav1.ConditionFalse, "WaitingForScheduler")
	if got.Status.RestartCount != 1 || got.Status.LastTermination == nil ||
		got.Status.LastTermination.ExitCode != 1 || !strings.Contains(got.Status.LastTermination.Message, "killed by signal 9") {
		t.Fatalf("restart not recorded: %+v", got.Status)
	}
	if n := restartsCounted(t) - restarts; n != 1 {
		t.Errorf("virtpod_vm_restarts_total went up by %v, want 1", n)
	}
	waitEvent(t, vm, "Normal Restarting: Restarting guest (restart 1, runStrategy Always): runner exited with code 1 (Error): qemu-system-x86_64 was killed by signal 9")

	// A crash loop: restart n waits 10 s doubling to 5 min from the end of the run before it,
	// says why and for how long, and makes no pod meanwhile.
	pod = second
	backoffs := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute}
	for i, backoff := range backoffs {
		n := int32(i + 2)
		bind(t, pod, "node-a")
		condition(t, vm, vmv1.PhaseStarting, vmv1.ConditionScheduled, metav1.ConditionTrue, "Scheduled") // the new pod is in status
		kubelet(t, pod, ended(1, "Error", fmt.Sprintf("guest panicked (%d)", n)))
		want := fmt.Sprintf("restart %d after Error (back-off %s): guest panicked (%d)", n, backoff, n)
		eventually(t, fmt.Sprintf("restart %d in back-off", n), func() error {
			got = getVM(t, vm)
			if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionReady); got.Status.Phase != vmv1.PhasePending ||
				got.Status.RestartCount != n || c == nil || c.Reason != "RestartBackoff" || c.Message != want {
				return fmt.Errorf("phase %s, restartCount %d, Ready %+v; want Ready %q", got.Status.Phase, got.Status.RestartCount, c, want)
			}
			return nil
		})
		// A second short of the back-off, a reconcile (made to record a spec change) starts nothing.
		clock.Advance(backoff - time.Second)
		reconciled(t, vm, func(vm *vmv1.VirtualMachine) { vm.Spec.TerminationGracePeriodSeconds = ptr.To(int64(30 + n)) })
		if p, err := runnerPod(vm); !apierrors.IsNotFound(err) {
			t.Fatalf("restart %d: runner pod %v exists before its back-off of %s ended (%v)", n, p.UID, backoff, err)
		}
		clock.Advance(2 * time.Second)
		reconciled(t, vm, func(vm *vmv1.VirtualMachine) { vm.Annotations = map[string]string{"test/poke": fmt.Sprint(n)} })
		pod = waitPod(t, vm, pod.UID)
	}
	want := 1 + 1 + len(backoffs)
	eventually(t, "pod creations seen", func() error {
		if n := created(); n < want {
			return fmt.Errorf("%d seen", n)
		}
		return nil
	})
	if n := created(); n != want {
		t.Fatalf("%d runner pods were created for one start and %d restarts", n, 1+len(backoffs))
	}
	if ev := waitEvent(t, vm, "restart 8, runStrategy Always"); strings.Count(ev, "Normal Restarting") != 8 {
		t.Fatalf("want 8 Restarting events:\n%s", ev)
	}
}

func TestRunStrategyOnceKeepsFailure(t *testing.T) {
	ns := namespace(t)
	vm := kubeapi.SampleVM(ns, "once")
	vm.Spec.RunStrategy = vmv1.RunOnce
	create(t, vm)
	pod := waitPod(t, vm, "")
	bind(t, pod, "node-b")
	msg := "provider binary not found: qemu-system-x86_64 (/usr/bin/qemu-system-x86_64)"
	kubelet(t, pod, ended(3, "Error", msg))
	got := condition(t, vm, vmv1.PhaseFailed, vmv1.ConditionReady, metav1.ConditionFalse, "RunnerFailed")
	if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionReady); !strings.Contains(c.Message, msg) {
		t.Fatalf("the runner's reason did not reach the condition: %q", c.Message)
	}
	if got.Status.RestartCount != 0 {
		t.Fatalf("restarted under Once: %+v", got.Status)
	}
	p, err := runnerPod(vm)
	if err != nil || p.UID != pod.UID {
		t.Fatalf("the failed pod should stay for its logs: %v", err)
	}
	ev := waitEvent(t, vm, "Warning Failed: Guest failed and runStrategy is Once")
	if strings.Count(ev, "Warning Failed") != 1 {
		t.Fatalf("want exactly one Failed event:\n%s", ev)
	}
}

func TestRunStrategyRerunOnFailureStopsAfterPowerOff(t *testing.T) {
	ns := namespace(t)
	vm := kubeapi.SampleVM(ns, "onfailure")
	vm.Spec.RunStrategy = vmv1.RunRerunOnFailure
	create(t, vm)
	pod := waitPod(t, vm, "")
	bind(t, pod, "node-b")
	kubelet(t, pod, running)
	kubelet(t, pod, ended(0, "Completed", ""))
	got := condition(t, vm, vmv1.PhaseSucceeded, vmv1.ConditionReady, metav1.ConditionFalse, "GuestStopped")
	if got.Status.RestartCount != 0 {
		t.Fatalf("restarted after a clean power-off under RerunOnFailure: %+v", got.Status)
	}
}

// TestDeletedPodIsReplaced: a runner pod deleted from under a running VM counts as a failure.
func TestDeletedPodIsReplaced(t *testing.T) {
	ns := namespace(t)
	vm := create(t, kubeapi.SampleVM(ns, "evicted"))
	pod := waitPod(t, vm, "")
	condition(t, vm, vmv1.PhaseScheduling, vmv1.ConditionScheduled, metav1.ConditionFalse, "WaitingForScheduler")
	if err := env.Client.Delete(context.Background(), pod); err != nil { // unbound: deleted at once
		t.Fatal(err)
	}
	waitPod(t, vm, pod.UID)
	got := getVM(t, vm)
	if got.Status.RestartCount != 1 || got.Status.LastTermination == nil || got.Status.LastTermination.Reason != "RunnerPodDeleted" {
		t.Fatalf("status: %+v", got.Status)
	}
}

// TestForeignPodIsNotAdopted: a pod that holds the runner's name but belongs to nobody is not
// taken over or deleted.
func TestForeignPodIsNotAdopted(t *testing.T) {
	ns := namespace(t)
	foreign := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: podspec.PodName("squatted")},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if err := env.Client.Create(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
	vm := create(t, kubeapi.SampleVM(ns, "squatted"))
	got := condition(t, vm, vmv1.PhasePending, vmv1.ConditionScheduled, metav1.ConditionFalse, "PodNameTaken")
	if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionScheduled); !strings.Contains(c.Message, "delete or rename that pod") {
		t.Fatalf("message: %q", c.Message)
	}
	p, err := runnerPod(vm)
	if err != nil || p.UID != foreign.UID || len(p.OwnerReferences) != 0 {
		t.Fatalf("foreign pod changed: %v %+v", err, p.OwnerReferences)
	}
	// Halted, the VM needs no pod, so the name does not matter: Stopped, the pod left alone.
	patchSpec(t, vm, map[string]any{"runStrategy": "Halted"})
	condition(t, vm, vmv1.PhaseStopped, vmv1.ConditionScheduled, metav1.ConditionFalse, vmv1.ReasonHalted)
	if p, err := runnerPod(vm); err != nil || p.UID != foreign.UID || p.DeletionTimestamp != nil {
		t.Fatalf("foreign pod touched by a halted VM: %v", err)
	}
}

// TestTwoControllersMakeOnePodPerVM runs a second controller against the same API server, as a
// stale or split-brain replica would: the deterministic pod name still yields one pod per VM.
func TestTwoControllersMakeOnePodPerVM(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mgr, err := manager.New(env.Config, manager.Options{Pod: podspec.DefaultOptions(), Workers: 4, MetricsAddr: "0", SecondInstance: true})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = mgr.Start(ctx) }()
	ns := namespace(t)
	const n = 40
	for i := range n {
		create(t, kubeapi.SampleVM(ns, fmt.Sprintf("race-%d", i)))
	}
	eventually(t, "every VM has its pod recorded in status", func() error {
		vms := &vmv1.VirtualMachineList{}
		if err := env.Client.List(ctx, vms, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, vm := range vms.Items {
			if vm.Status.PodUID == "" {
				return fmt.Errorf("%s has no pod yet", vm.Name)
			}
		}
		return nil
	})
	pods := &corev1.PodList{}
	if err := env.Client.List(ctx, pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != n {
		t.Fatalf("%d pods for %d VMs", len(pods.Items), n)
	}
	for _, p := range pods.Items {
		vm := getVM(t, &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.Labels[podspec.LabelVMName]}})
		if vm.Status.PodUID != string(p.UID) {
			t.Errorf("%s: status names pod %s, the pod is %s", vm.Name, vm.Status.PodUID, p.UID)
		}
		if vm.Status.RestartCount != 0 {
			t.Errorf("%s: a stale cache was taken for a lost pod: %d restarts", vm.Name, vm.Status.RestartCount)
		}
	}
}

// TestDeletedPodUnderOnceFails: under runStrategy Once a runner pod deleted from under the
// guest leaves the VM Failed, says why once, and starts nothing.
func TestDeletedPodUnderOnceFails(t *testing.T) {
	vm := kubeapi.SampleVM(namespace(t), "gone")
	vm.Spec.RunStrategy = vmv1.RunOnce
	create(t, vm)
	pod := waitPod(t, vm, "")
	condition(t, vm, vmv1.PhaseScheduling, vmv1.ConditionScheduled, metav1.ConditionFalse, "WaitingForScheduler")
	if err := env.Client.Delete(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	got := condition(t, vm, vmv1.PhaseFailed, vmv1.ConditionReady, metav1.ConditionFalse, "RunnerFailed")
	if got.Status.RestartCount != 0 || got.Status.LastTermination == nil || got.Status.LastTermination.Reason != "RunnerPodDeleted" {
		t.Fatalf("status %+v", got.Status)
	}
	ev := waitEvent(t, vm, "Warning Failed: Guest failed and runStrategy is Once")
	if strings.Count(ev, "Warning Failed") != 1 {
		t.Fatalf("want exactly one Failed event:\n%s", ev)
	}
	if _, err := runnerPod(vm); !apierrors.IsNotFound(err) {
		t.Fatalf("a pod was started under runStrategy Once: %v", err)
	}
}
