package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestSuspendUnderControllerKills: 30 running VMs on claims are suspended (spec.suspend, as
// vmctl does) while the controller is SIGKILLed again and again; the simulated node plays the
// agent and the runner that save each guest. Afterwards every VM is Suspended with its state
// recorded and no pod, also after yet another controller restart that reconciles each of them.
// Resumed under kills too, every VM runs in a new pod that loads its state, which is then
// consumed; no restart is counted, and the pods made and removed are exactly one resume and
// one suspend each: a saved state is never lost, never loaded twice, never booted over.
func TestSuspendUnderControllerKills(t *testing.T) {
	const n, lives = 30, 6
	rnd := rand.New(rand.NewPCG(faultSeed(t), 2))
	s := newScene(t, "park-1", "park-2")
	s.kubelets.PlaySuspends()
	ctx := context.Background()
	for i := range n {
		for _, c := range []string{vmName(i) + "-root", vmName(i) + "-state"} {
			if err := kubeapi.BoundClaim(ctx, env.Client, s.ns, c); err != nil {
				t.Fatal(err)
			}
		}
		s.createVM(ctx, t, vmName(i), func(vm *vmv1.VirtualMachine) {
			vm.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: vm.Name + "-root"}
			vm.Spec.Guest.StateClaim = &vmv1.StateClaim{ClaimName: vm.Name + "-state"}
			vm.Spec.Guest.NetworkMode = vmv1.NetworkMasquerade
		})
	}
	c := s.startController(t)
	s.converged(t, n, time.Minute, nil)
	first := map[string]types.UID{}
	for i := range n {
		p, err := getPod(s.ns, vmName(i))
		if err != nil {
			t.Fatal(err)
		}
		first[vmName(i)] = p.UID
	}
	c.kill()

	s.underKills(t, rnd, lives, n, func(int) string { return `{"spec":{"suspend":true}}` })
	c = s.startController(t)
	s.parked(t, n)
	// Suspended survives a controller restart: the new controller reconciles each VM and
	// starts none.
	c.kill()
	c = s.startController(t)
	for i := range n {
		s.pokeVM(t, vmName(i))
	}
	s.parked(t, n)
	c.kill()

	s.underKills(t, rnd, lives, n, func(int) string { return `{"spec":{"suspend":false}}` })
	c = s.startController(t)
	kubeapi.Eventually(t, "every VM resumed in a new pod, its state consumed", 2*time.Minute, func() error {
		for i := range n {
			vm := getVM(t, s.ns, vmName(i))
			pod, err := getPod(s.ns, vm.Name)
			if err != nil {
				return fmt.Errorf("%s: %v", vm.Name, err)
			}
			st := vm.Status
			switch {
			case pod.UID == first[vm.Name]:
				return fmt.Errorf("%s: still in its first pod", vm.Name)
			case !podspec.ResumedFrom(pod):
				return fmt.Errorf("%s: pod %s boots instead of resuming: %v", vm.Name, pod.UID, pod.Spec.Containers[0].Args)
			case st.Phase != vmv1.PhaseRunning || st.SuspendedState != nil || st.PodUID != string(pod.UID):
				return fmt.Errorf("%s: phase %s, suspendedState %+v, podUID %s", vm.Name, st.Phase, st.SuspendedState, st.PodUID)
			case st.RestartCount != 0 || st.UserRestartCount != 0:
				return fmt.Errorf("%s: %d restarts, %d user restarts", vm.Name, st.RestartCount, st.UserRestartCount)
			}
		}
		return nil
	})
	s.wantPodCounts(t, 2*n, n)
	if !c.alive() {
		t.Fatal("the last controller exited")
	}
}

// parked waits until each VM is Suspended with its state recorded, no pod and no restart.
func (s *scene) parked(t *testing.T, n int) {
	t.Helper()
	kubeapi.Eventually(t, "every VM suspended", 2*time.Minute, func() error {
		for i := range n {
			vm := getVM(t, s.ns, vmName(i))
			st := vm.Status
			_, err := getPod(s.ns, vm.Name)
			if st.Phase != vmv1.PhaseSuspended || st.SuspendedState == nil || st.SuspendedState.ClaimName != vm.Name+"-state" || st.PodUID != "" || !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s: phase %s, suspendedState %+v, podUID %q, pod %v", vm.Name, st.Phase, st.SuspendedState, st.PodUID, err)
			}
			if st.RestartCount != 0 || st.UserRestartCount != 0 {
				return fmt.Errorf("%s: %d restarts, %d user restarts", vm.Name, st.RestartCount, st.UserRestartCount)
			}
		}
		return nil
	})
}
