package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// cleanPowerOff is what the guest's kernel prints on the console when it obeys the ACPI power
// button, and what the runner's termination message says then.
const (
	cleanPowerOff    = "reboot: Power down"
	poweredOffByTERM = "stopped on SIGTERM: guest powered off"
)

// TestPowerVerbs is one VM's life through vmctl, on local-path claims: booted, snapshotted while
// it runs (snapshots.go's steps: a frozen full copy, exported, then an incremental one after the
// guest writes a line, and a clone of it booting beside), restarted, stopped, restored to the
// first snapshot and started. At each power step the phase, the runner pod's UID and the counts
// are checked, and each power-down is seen to be clean: the guest's kernel powered off on the
// ACPI button (its console line) and, when the controller saw it, the runner's termination
// message in lastTermination. The restored guest's boot count goes on from the first snapshot's,
// so the line written after it is gone. On the first run a claim is hotplugged, written, detached
// and attached to the clone, which reads it (hotplug_test.go). Four guest boots in all (three
// runs and the clone): the snapshot and hotplug steps ride on the runs the power verbs make anyway.
func TestPowerVerbs(t *testing.T) {
	parallelSafe(t)
	ctx := context.Background()
	ns := namespace(t)
	ctl := newPowerCtl(t, ns)
	for name, size := range map[string]string{"pw-root": "128Mi", "pw-data": "32Mi"} {
		if err := kube.Create(ctx, newClaim(ns, name, size, corev1.PersistentVolumeFilesystem)); err != nil {
			t.Fatal(err)
		}
	}
	vm := newVM(ns, "pw")
	vm.Spec.Guest.RootDisk.Size = ptr.To(resource.MustParse("128Mi"))
	vm.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "pw-root"}
	vm.Spec.Guest.Disks = []vmv1.Disk{{Name: "data", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "pw-data"}}}
	vm.Spec.Guest.KernelArgs = "rw virtpod.boot-count virtpod.disk-write=data:pw-wrote virtpod.disk-write=hot:pw-hot"
	if err := kube.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	first := waitRunning(t, ns, "pw", 0)
	pod := podspec.PodName("pw")
	guestLog(t, ns, "pw", marker, "VIRTPOD-GUEST-BOOTS 1", "VIRTPOD-GUEST-DISK-WROTE serial=data word=pw-wrote")
	show(t, ns, "booted")
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run("-n", ns, "get", "vm,vmsnap,vmrestore,pods,pvc", "-o", "wide")
			agents, _ := run("-n", "virtpod-system", "logs", "-l", "app.kubernetes.io/name=virtpod-agent", "--tail=30", "--prefix")
			t.Logf("at failure:\n%s\nagents:\n%s", out, agents)
		}
	})
	snapshotRunningGuest(t, ns, first)
	hotplugAcrossVMs(t, ctl, ns, first)

	// restart: a clean power-down, then the guest boots in a new pod: three lines in its boot
	// file now (two boots and the one it was typed).
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
	guestLog(t, ns, "pw", marker, "VIRTPOD-GUEST-BOOTS 3")
	hotplugSurvivedRestart(t, ns)
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

	// Restored to s1 while stopped: new claims in place of the old.
	ctl.ok(t, "restore", "pw", "s1")
	if names := getVM(t, ns, "pw").Spec.Guest.ClaimNames(); len(names) != 2 || names[0] == "pw-root" || names[1] == "pw-data" {
		t.Fatalf("the restored VM's claims %v: want new ones in place of pw-root and pw-data", names)
	}

	// start: a new pod again, no restart counted, and the boot count goes on from s1's one line.
	ctl.ok(t, "start", "pw")
	third := waitRunning(t, ns, "pw", 0)
	if third.Status.PodUID == second.Status.PodUID || third.Status.UserRestartCount != 1 || third.Spec.RunStrategy != vmv1.RunAlways {
		t.Fatalf("after start: %s, %+v", third.Spec.RunStrategy, third.Status)
	}
	guestLog(t, ns, "pw", "VIRTPOD-GUEST-BOOTS 2", "VIRTPOD-GUEST-DISK serial=data sectors=65536 ro=0 head=pw-wrote")
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
