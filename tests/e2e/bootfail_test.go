package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Tiny VM images for bad input (make test-images): a disk with no bootloader, and an image whose
// /disk/ holds two disk files.
const (
	noBootloaderImage = "localhost/virtpod/nobootloader:dev"
	twoDisksImage     = "localhost/virtpod/twodisks:dev"
)

// TestGuestBootFailures: what a user gets wrong shows in the VM's status, in words, instead of a
// VM that says Running while nothing works.
//   - An early kernel panic (no init) ends the run with the panic in lastTermination under every
//     run strategy that starts one; those that restart do so with back-off.
//   - A disk without a bootloader fails the VM, within the boot watchdog, naming the fix.
//   - A VM image with two disk files fails naming them.
//   - A readiness probe on a port the guest never opens: Running, but Ready stays False and says
//     which probe it waits for.
func TestGuestBootFailures(t *testing.T) {
	parallelSafe(t)
	ctx := context.Background()
	ns := namespace(t)
	strategies := []vmv1.RunStrategy{vmv1.RunAlways, vmv1.RunRerunOnFailure, vmv1.RunOnce, vmv1.RunManual}
	for i, s := range strategies {
		vm := newVM(ns, fmt.Sprintf("panic-%d", i))
		vm.Spec.RunStrategy = s
		vm.Spec.Guest.KernelArgs = "rdinit=/nonexistent-init"
		mustCreate(t, vm)
	}
	noboot := newVM(ns, "noboot")
	noboot.Spec.Guest.KernelImage = ""
	noboot.Spec.Guest.RootDisk = vmv1.RootDisk{Image: noBootloaderImage}
	noboot.Spec.RunStrategy = vmv1.RunOnce
	mustCreate(t, noboot)
	two := newVM(ns, "twodisks")
	two.Spec.Guest.KernelImage = ""
	two.Spec.Guest.RootDisk = vmv1.RootDisk{Image: twoDisksImage}
	two.Spec.RunStrategy = vmv1.RunOnce
	mustCreate(t, two)
	probe := newVM(ns, "unready")
	probe.Spec.Guest.ReadinessProbe = &vmv1.GuestProbe{TCPSocket: &vmv1.TCPProbe{Port: 9}}
	mustCreate(t, probe)

	for i, s := range strategies {
		name := fmt.Sprintf("panic-%d", i)
		eventually(t, fmt.Sprintf("%s (%s): the panic in lastTermination", name, s), 4*time.Minute, func() error {
			st := getVM(t, ns, name).Status
			lt := st.LastTermination
			if lt == nil || lt.ExitCode != 6 {
				return fmt.Errorf("phase %s, lastTermination %+v", st.Phase, lt)
			}
			if err := contains(lt.Message, "guest kernel panicked", "Kernel panic - not syncing"); err != nil {
				return err
			}
			switch s {
			case vmv1.RunOnce, vmv1.RunManual:
				if st.Phase != vmv1.PhaseFailed {
					return fmt.Errorf("phase %s, want Failed", st.Phase)
				}
			default:
				if st.RestartCount < 1 {
					return fmt.Errorf("restartCount %d, want a restart", st.RestartCount)
				}
			}
			return nil
		})
	}
	failedWith(t, ns, "noboot", 3*time.Minute, "the root disk has no bootloader", "use a bootable image, or set guest.kernelImage")
	failedWith(t, ns, "twodisks", 3*time.Minute, "2 disk files (one.img, two.raw)")

	// The probe's VM: the guest runs, but Ready stays False, naming the probe.
	waitRunning(t, ns, "unready", 0)
	notReady := func() error {
		c := meta.FindStatusCondition(getVM(t, ns, "unready").Status.Conditions, vmv1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != vmv1.ReasonGuestNotReady {
			return fmt.Errorf("Ready %+v", c)
		}
		return contains(c.Message, "readiness probe", "TCP port 9")
	}
	eventually(t, "Ready False naming the probe", time.Minute, notReady)
	// Held, not passing through: it is still so after many probe periods.
	time.Sleep(20 * time.Second)
	if err := notReady(); err != nil {
		t.Fatal(err)
	}
	_ = ctx
}

// failedWith waits for the VM to fail with a Ready message and lastTermination that mention
// each of parts.
func failedWith(t *testing.T, ns, name string, timeout time.Duration, parts ...string) {
	t.Helper()
	eventually(t, name+" Failed with its reason", timeout, func() error {
		st := getVM(t, ns, name).Status
		c := meta.FindStatusCondition(st.Conditions, vmv1.ConditionReady)
		if st.Phase != vmv1.PhaseFailed || c == nil || st.LastTermination == nil {
			return fmt.Errorf("status %+v", st)
		}
		if err := contains(st.LastTermination.Message, parts...); err != nil {
			return err
		}
		return contains(c.Message, parts...)
	})
}
