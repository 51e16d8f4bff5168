package vmctl

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/manager"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestPowerVerbsAgainstAPIServer runs vmctl stop, start and restart in-process against a real
// API server with the real controller and simulated kubelets (tests/kubeapi), as a user would,
// and one namespace without kubelets, where a deleted pod stays until something removes it.
func TestPowerVerbsAgainstAPIServer(t *testing.T) {
	kc := needAPI(t)
	ctx, cancel := context.WithCancel(context.Background())
	const ns, still = "power", "power-still" // with simulated kubelets; without
	for _, n := range []string{ns, still} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	// The default class, as config/providers ships it; TestStatusAndProviderAgainstAPIServer
	// makes its own, so this one goes with the controller.
	qemu := &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: "qemu", Annotations: map[string]string{vmv1.AnnotationDefaultClass: "true"}},
		Spec: vmv1.ProviderClassSpec{Handler: vmv1.ProviderQEMU, AllowEmulation: true}}
	if err := env.Client.Create(ctx, qemu); err != nil {
		t.Fatal(err)
	}
	if err := kubeapi.CreateNode(ctx, env.Client, "power-node"); err != nil {
		t.Fatal(err)
	}
	if _, err := kubeapi.StartKubelets(ctx, env.Config, ns, "power-node"); err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(env.Config, manager.Options{Pod: podspec.DefaultOptions(), Workers: 2, MetricsAddr: "0", SecondInstance: true})
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { _ = mgr.Start(ctx); close(stopped) }()
	t.Cleanup(func() {
		cancel()
		<-stopped
		bg := context.Background()
		_ = env.Client.Delete(bg, qemu)
		_ = env.Client.Delete(bg, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "power-node"}})
	})
	kcNS, kcStill := inNamespace(t, kc, ns), inNamespace(t, kc, still)
	web := createVM(t, kubeapi.SampleVM(ns, "web"))
	first := runningIn(t, web, "")

	t.Run("missing VM", func(t *testing.T) {
		for _, verb := range []string{"stop", "start", "restart"} {
			_, errOut, code := vmctlWithin(t, 10*time.Second, "--kubeconfig", kcNS, verb, "nope")
			if code != 1 || errOut != "error: VirtualMachine \"nope\" not found in namespace \"power\"\n" {
				t.Errorf("%s nope: exit %d, stderr %q; want exit 1 and one line", verb, code, errOut)
			}
		}
	})

	t.Run("wrong command line", func(t *testing.T) {
		for _, args := range [][]string{{"stop"}, {"restart", "a", "b"}, {"start", "web", "--strategy", "Halted"}} {
			if _, errOut, code := vmctl(append([]string{"--kubeconfig", kcNS}, args...)...); code != 2 || strings.Count(errOut, "\n") > 2 {
				t.Errorf("%v: exit %d, stderr %q; want exit 2", args, code, errOut)
			}
		}
	})

	var second *vmv1.VirtualMachine
	t.Run("restart", func(t *testing.T) {
		out, errOut, code := vmctlWithin(t, time.Minute, "--kubeconfig", kcNS, "restart", "web", "--timeout", "50s")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
		}
		second = runningIn(t, web, first.Status.PodUID)
		for _, want := range []string{"vm power/web restart asked for at ", "vm power/web Running after ", "in runner pod web-runner (uid " + second.Status.PodUID + ")", "(user restarts 1, crash restarts 0)"} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout lacks %q:\n%s", want, out)
			}
		}
		if second.Status.UserRestartCount != 1 || second.Status.RestartCount != 0 || second.Status.LastRunRequest == nil {
			t.Errorf("status %+v", second.Status)
		}
		waitEvent(t, web, "Restarted by vmctl (runRequestedAt ")
	})

	t.Run("stop", func(t *testing.T) {
		out, errOut, code := vmctlWithin(t, time.Minute, "--kubeconfig", kcNS, "stop", "web", "--timeout", "50s")
		if code != 0 || !strings.Contains(out, "vm power/web runStrategy Halted: the guest powers down (grace period 30s)") || !strings.Contains(out, "vm power/web Stopped after ") {
			t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
		}
		if got := getVM(t, web); got.Status.Phase != vmv1.PhaseStopped || got.Spec.RunStrategy != vmv1.RunHalted {
			t.Errorf("after stop: %s, %+v", got.Spec.RunStrategy, got.Status)
		}
		if _, err := pod(web); !apierrors.IsNotFound(err) {
			t.Errorf("a runner pod after stop: %v", err)
		}
		waitEvent(t, web, "Stopped by vmctl (runStrategy Halted)")
		out, _, code = vmctl("--kubeconfig", kcNS, "stop", "web")
		if code != 0 || out != "vm power/web is already stopped (runStrategy Halted)\n" {
			t.Errorf("stop again: exit %d, %q", code, out)
		}
	})

	t.Run("restart refuses a Halted VM", func(t *testing.T) {
		out, errOut, code := vmctl("--kubeconfig", kcNS, "restart", "web")
		if code != exitRefused || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "is Halted") || !strings.Contains(errOut, "vmctl start web") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})

	t.Run("start", func(t *testing.T) {
		out, errOut, code := vmctlWithin(t, time.Minute, "--kubeconfig", kcNS, "start", "web", "--timeout", "50s")
		if code != 0 || !strings.Contains(out, "vm power/web runStrategy Always: starting") || !strings.Contains(out, "Running after") {
			t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
		}
		got := runningIn(t, web, second.Status.PodUID)
		if got.Spec.RunStrategy != vmv1.RunAlways || got.Status.UserRestartCount != 1 || got.Status.RestartCount != 0 {
			t.Errorf("after start: %s, %+v", got.Spec.RunStrategy, got.Status)
		}
		waitEvent(t, web, "Started by vmctl (runStrategy Always)")
		out, _, code = vmctl("--kubeconfig", kcNS, "start", "web")
		if code != 0 || out != "vm power/web is already running or on its way (phase Running, runStrategy Always)\n" {
			t.Errorf("start again: exit %d, %q", code, out)
		}
	})

	t.Run("start an ended run", func(t *testing.T) {
		batch := kubeapi.SampleVM(ns, "batch")
		batch.Spec.RunStrategy = vmv1.RunOnce
		createVM(t, batch)
		ran := runningIn(t, batch, "")
		p, err := pod(batch)
		if err != nil {
			t.Fatal(err)
		}
		env.Kubelet(t, p, func(s *corev1.PodStatus) { // the guest powers itself off
			s.Phase = corev1.PodSucceeded
			s.ContainerStatuses = []corev1.ContainerStatus{{Name: vmv1.RunnerContainer,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: "the guest powered off"}}}}
		})
		kubeapi.Eventually(t, "batch Succeeded", 20*time.Second, func() error {
			if ph := getVM(t, batch).Status.Phase; ph != vmv1.PhaseSucceeded {
				return fmt.Errorf("phase %s", ph)
			}
			return nil
		})
		out, errOut, code := vmctlWithin(t, time.Minute, "--kubeconfig", kcNS, "start", "batch", "--timeout", "50s")
		if code != 0 || !strings.Contains(out, "vm power/batch its run ended (Succeeded): a new run asked for at ") || !strings.Contains(out, "(user restarts 1, crash restarts 0)") {
			t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
		}
		runningIn(t, batch, ran.Status.PodUID)
	})

	t.Run("timeout", func(t *testing.T) {
		stuck := createVM(t, kubeapi.SampleVM(still, "stuck")) // no kubelet: its pod never runs
		start := time.Now()
		_, errOut, code := vmctlWithin(t, 30*time.Second, "--kubeconfig", kcStill, "restart", "stuck", "--timeout", "2s")
		if code != exitTimedOut || !strings.Contains(errOut, "VM power-still/stuck is not Running after 2s: it is ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("--timeout 2s took %s", d)
		}
		_ = stuck
	})

	t.Run("force", func(t *testing.T) {
		hold := createVM(t, kubeapi.SampleVM(still, "hold"))
		var p *corev1.Pod
		kubeapi.Eventually(t, "hold's pod", 20*time.Second, func() (err error) { p, err = pod(hold); return err })
		env.Bind(t, p, "power-node")
		env.Kubelet(t, p, kubeapi.RunnerRunning("10.99.0.1"))
		runningIn(t, hold, "")
		// Without --force the pod stays Terminating until its kubelet confirms the stop, which
		// here nothing does.
		if out, errOut, code := vmctl("--kubeconfig", kcStill, "stop", "hold", "--wait=false"); code != 0 {
			t.Fatalf("stop: exit %d, %q %q", code, out, errOut)
		}
		kubeapi.Eventually(t, "hold's pod deleted with its grace period", 20*time.Second, func() error {
			got, err := pod(hold)
			if err != nil {
				return err
			}
			if got.DeletionTimestamp == nil || got.DeletionGracePeriodSeconds == nil || *got.DeletionGracePeriodSeconds == 0 {
				return fmt.Errorf("deletion %v, grace %v", got.DeletionTimestamp, got.DeletionGracePeriodSeconds)
			}
			return nil
		})
		out, errOut, code := vmctlWithin(t, time.Minute, "--kubeconfig", kcStill, "stop", "hold", "--force", "--timeout", "30s")
		if code != 0 || !strings.Contains(out, "runner pod hold-runner deleted with grace period 0 (--force)") || !strings.Contains(out, "Stopped after") {
			t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
		}
		if _, err := pod(hold); !apierrors.IsNotFound(err) {
			t.Errorf("pod still there after --force: %v", err)
		}
	})

	t.Run("suspend and resume", func(t *testing.T) { suspendVerbs(t, still, kcStill) })
}

// inNamespace writes a copy of the kubeconfig whose context uses ns, as `kubectl config
// set-context --current --namespace` does.
func inNamespace(t *testing.T, kubeconfig, ns string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Contexts[cfg.CurrentContext].Namespace = ns
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func createVM(t *testing.T, vm *vmv1.VirtualMachine) *vmv1.VirtualMachine {
	t.Helper()
	if err := env.Client.Create(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	return vm
}

func getVM(t *testing.T, vm *vmv1.VirtualMachine) *vmv1.VirtualMachine {
	t.Helper()
	got := &vmv1.VirtualMachine{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(vm), got); err != nil {
		t.Fatal(err)
	}
	return got
}

func pod(vm *vmv1.VirtualMachine) (*corev1.Pod, error) {
	p := &corev1.Pod{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: vm.Namespace, Name: podspec.PodName(vm.Name)}, p)
	return p, err
}

// runningIn waits until the VM runs in a pod other than not.
func runningIn(t *testing.T, vm *vmv1.VirtualMachine, not string) *vmv1.VirtualMachine {
	t.Helper()
	var got *vmv1.VirtualMachine
	kubeapi.Eventually(t, vm.Name+" running", 30*time.Second, func() error {
		got = getVM(t, vm)
		if got.Status.Phase != vmv1.PhaseRunning || got.Status.PodUID == "" || got.Status.PodUID == not {
			return fmt.Errorf("phase %s in pod %q", got.Status.Phase, got.Status.PodUID)
		}
		return nil
	})
	return got
}

func waitEvent(t *testing.T, vm *vmv1.VirtualMachine, want string) {
	t.Helper()
	kubeapi.Eventually(t, "event "+want, 20*time.Second, func() error {
		list := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), list, client.InNamespace(vm.Namespace)); err != nil {
			return err
		}
		var notes []string
		for _, e := range list.Items {
			if e.Regarding.Name == vm.Name && strings.Contains(e.Note, want) {
				return nil
			}
			notes = append(notes, e.Reason+": "+e.Note)
		}
		return fmt.Errorf("events: %s", strings.Join(notes, "\n"))
	})
}
