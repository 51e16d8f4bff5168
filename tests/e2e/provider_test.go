package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// vmctl builds the CLI once per test and runs it against the cluster.
func vmctl(t *testing.T) func(args ...string) (string, int) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "vmctl")
	if out, err := exec.Command("go", "build", "-o", bin, kubeapi.Root()+"/tools/vmctl").CombinedOutput(); err != nil {
		t.Fatalf("building vmctl: %v\n%s", err, out)
	}
	return func(args ...string) (string, int) {
		out, err := exec.Command(bin, args...).CombinedOutput()
		code := 0
		if e, ok := err.(*exec.ExitError); ok {
			code = e.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
}

func readyCondition(t *testing.T, ns, name, ctype, reason, msg string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s/%s: %s reason %s", ns, name, ctype, reason), 2*time.Minute, func() error {
		c := meta.FindStatusCondition(getVM(t, ns, name).Status.Conditions, ctype)
		if c == nil || c.Reason != reason || !strings.Contains(c.Message, msg) {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
}

// TestProviders: vmctl tells which providers run where; a VM asking for cloud-hypervisor, which
// no node has, waits with virtpod's reason; disabling qemu blocks a new VM with the admin's
// reason and leaves the running one alone.
func TestProviders(t *testing.T) {
	ctx := context.Background()
	run := vmctl(t)
	eventually(t, "vmctl status: qemu available on the node, cloud-hypervisor nowhere", 2*time.Minute, func() error {
		out, code := run("status")
		if code != 0 {
			return fmt.Errorf("exit %d:\n%s", code, out)
		}
		return contains(out, "qemu", "1/1 nodes fit", "cloud-hypervisor", "0/1 nodes fit: 1 without cloud-hypervisor", "virtpod-node", "10.0.")
	})

	ns := namespace(t)
	if err := kube.Create(ctx, newVM(ns, "steady")); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, ns, "steady", 0)

	ch := newVM(ns, "wants-ch")
	ch.Spec.Provider, ch.Spec.Acceleration = vmv1.ProviderCloudHypervisor, vmv1.AccelerationKVM
	if err := kube.Create(ctx, ch); err != nil {
		t.Fatal(err)
	}
	readyCondition(t, ns, "wants-ch", vmv1.ConditionScheduled, "Unschedulable", "virtpod: 0/1 nodes fit: 1 without cloud-hypervisor")
	if got := getVM(t, ns, "wants-ch"); got.Status.Phase != vmv1.PhaseScheduling {
		t.Fatalf("a VM asking for a provider no node has is %s", got.Status.Phase)
	}

	if out, code := run("provider", "disable", "qemu", "--reason", "e2e maintenance window"); code != 0 {
		t.Fatalf("vmctl provider disable: exit %d\n%s", code, out)
	}
	t.Cleanup(func() { run("provider", "enable", "qemu") })
	readyCondition(t, ns, "steady", vmv1.ConditionProviderAvailable, "ProviderDisabled", "a running guest keeps running")
	if err := kube.Create(ctx, newVM(ns, "blocked")); err != nil {
		t.Fatal(err)
	}
	readyCondition(t, ns, "blocked", vmv1.ConditionProviderAvailable, "ProviderDisabled", "e2e maintenance window")
	if _, err := kubeset.CoreV1().Pods(ns).Get(ctx, podspec.PodName("blocked"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a runner pod was made while qemu is disabled: %v", err)
	}
	if got := getVM(t, ns, "steady"); got.Status.Phase != vmv1.PhaseRunning || got.Status.RestartCount != 0 {
		t.Fatalf("the running VM was disturbed: %+v", got.Status)
	}
	out, code := run("status")
	if code == 0 || !strings.Contains(out, "e2e maintenance window") {
		t.Fatalf("vmctl status with the default disabled: exit %d\n%s", code, out)
	}

	if out, code := run("provider", "enable", "qemu"); code != 0 {
		t.Fatalf("vmctl provider enable: exit %d\n%s", code, out)
	}
	waitRunning(t, ns, "blocked", 0)
}
