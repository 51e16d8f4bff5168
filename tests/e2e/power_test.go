package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// cleanPowerOff is what the guest's kernel prints on the console when it obeys the ACPI power
// button, and what the runner's termination message says then.
const (
	cleanPowerOff    = "reboot: Power down"
	poweredOffByTERM = "stopped on SIGTERM: guest powered off"
)

// TestPowerVerbs: vmctl restart, stop and start on one booted guest (three boots in all, under
// TCG). At each step the phase, the runner pod's UID and the counts are checked, and each
// power-down is seen to be clean: the guest's kernel powered off on the ACPI button (its console
// line) and, when the controller saw it, the runner's termination message in lastTermination.
func TestPowerVerbs(t *testing.T) {
	parallelSafe(t)
	ctx := context.Background()
	ns := namespace(t)
	ctl := newPowerCtl(t, ns)
	if err := kube.Create(ctx, newVM(ns, "pw")); err != nil {
		t.Fatal(err)
	}
	first := waitRunning(t, ns, "pw", 0)
	pod := podspec.PodName("pw")
	eventually(t, "the guest booted", 2*time.Minute, func() error { return contains(podLogs(ns, pod), marker) })
	show(t, ns, "booted")

	// restart: a clean power-down, then the guest boots in a new pod.
	console := followLogs(t, ns, pod)
	out := ctl.ok(t, "restart", "pw")
	if err := contains(<-console, cleanPowerOff); err != nil {
		t.Fatalf("the restart did not power the guest down cleanly: %v", err)
	}
	second := waitRunning(t, ns, "pw", 0)
	if second.Status.PodUID == first.Status.PodUID || second.Status.UserRestartCount != 1 {
		t.Fatalf("after restart: pod %s (was %s), %d user restarts", second.Status.PodUID, first.Status.PodUID, second.Status.UserRestartCount)
	}
	if err := contains(out, "restart asked for at", "Running after", "(uid "+second.Status.PodUID+")", "(user restarts 1, crash restarts 0)"); err != nil {
		t.Error(err)
	}
	eventually(t, "the guest booted again", 2*time.Minute, func() error { return contains(podLogs(ns, pod), marker) })
	show(t, ns, "restarted")
	ctl.code(t, 0, "start", "pw") // already running: said, nothing done

	// stop: a clean power-down, no pod, phase Stopped, and nothing comes back.
	console = followLogs(t, ns, pod)
	out = ctl.ok(t, "stop", "pw")
	if err := contains(<-console, cleanPowerOff); err != nil {
		t.Fatalf("the stop did not power the guest down cleanly: %v", err)
	}
	stopped := getVM(t, ns, "pw")
	if stopped.Status.Phase != vmv1.PhaseStopped || stopped.Status.PodUID != "" || stopped.Status.RestartCount != 0 {
		t.Fatalf("after stop: %+v", stopped.Status)
	}
	// The runner's own word, when the controller saw the runner end before the kubelet removed
	// the pod (a matter of milliseconds, so not always): it must then be the clean power-off.
	if lt := stopped.Status.LastTermination; lt != nil {
		if lt.ExitCode != 0 || lt.Message != poweredOffByTERM {
			t.Errorf("lastTermination after the stop: %+v, want exit 0 %q", lt, poweredOffByTERM)
		}
		t.Logf("lastTermination: %s", lt.Message)
	}
	if err := contains(out, "runStrategy Halted: the guest powers down (grace period 20s)", "Stopped after"); err != nil {
		t.Error(err)
	}
	if _, err := kubeset.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a runner pod after the stop: %v", err)
	}
	show(t, ns, "stopped")
	refused := ctl.code(t, exitRefused, "restart", "pw")
	t.Logf("vmctl restart of the stopped VM (exit 3):\n%s", refused)

	// start: a new pod again, no restart counted.
	ctl.ok(t, "start", "pw")
	third := waitRunning(t, ns, "pw", 0)
	if third.Status.PodUID == second.Status.PodUID || third.Status.UserRestartCount != 1 || third.Spec.RunStrategy != vmv1.RunAlways {
		t.Fatalf("after start: %s, %+v", third.Spec.RunStrategy, third.Status)
	}
	show(t, ns, "started")
	events, _ := run("-n", ns, "events", "--for", "vm/pw")
	t.Logf("kubectl events --for vm/pw:\n%s", events)
	if err := contains(events, "Restarted by vmctl", "Stopped by vmctl (runStrategy Halted)", "Started by vmctl (runStrategy Always)"); err != nil {
		t.Error(err)
	}
}

// exitRefused is vmctl's exit code for a verb the VM's state does not allow (docs/vmctl.md).
const exitRefused = 3

// powerCtl runs vmctl with a kubeconfig whose context uses the test's namespace.
type powerCtl struct {
	run        func(args ...string) (string, int)
	kubeconfig string
}

func newPowerCtl(t *testing.T, ns string) powerCtl {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Contexts[cfg.CurrentContext].Namespace = ns
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	return powerCtl{run: vmctl(t), kubeconfig: kc}
}

// code runs vmctl and wants the exit code; it returns stdout and stderr.
func (v powerCtl) code(t *testing.T, want int, args ...string) string {
	t.Helper()
	start := time.Now()
	out, got := v.run(append([]string{"--kubeconfig", v.kubeconfig}, args...)...)
	t.Logf("$ vmctl %s   (%s, exit %d)\n%s", strings.Join(args, " "), time.Since(start).Round(time.Second), got, out)
	if got != want {
		t.Fatalf("vmctl %v: exit %d, want %d:\n%s", args, got, want, out)
	}
	return out
}

func (v powerCtl) ok(t *testing.T, args ...string) string { t.Helper(); return v.code(t, 0, args...) }

// show logs kubectl get vm -o wide, as a user would look.
func show(t *testing.T, ns, when string) {
	t.Helper()
	out, err := run("-n", ns, "get", "vm", "-o", "wide")
	if err != nil {
		t.Fatalf("kubectl get vm: %v\n%s", err, out)
	}
	t.Logf("%s: kubectl get vm -o wide\n%s", when, out)
}
