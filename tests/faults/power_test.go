package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestPowerUnderControllerKills: half of 60 running VMs are stopped (runStrategy Halted) and the
// other half restarted (runRequestedAt), as vmctl does, while the controller is SIGKILLed again
// and again. Afterwards every halted VM is Stopped without a pod, also after yet another
// controller restart that reconciles each of them, and every restarted one runs in a new pod
// with exactly one user restart and no crash restart. A second round starts the halted VMs and
// restarts the others again, under kills too; in the end the pods ever made and removed are
// exactly those the requests call for: none twice, none lost.
func TestPowerUnderControllerKills(t *testing.T) {
	const n, lives = 60, 10
	rnd := rand.New(rand.NewPCG(faultSeed(t), 1))
	s := newScene(t, "power-1", "power-2", "power-3")
	ctx := context.Background()
	c := s.startController(t)
	for i := range n {
		s.createVM(ctx, t, vmName(i), nil)
	}
	s.converged(t, n, time.Minute, nil)
	original := map[string]types.UID{}
	for i := range n {
		p, err := getPod(s.ns, vmName(i))
		if err != nil {
			t.Fatal(err)
		}
		original[vmName(i)] = p.UID
	}
	c.kill()

	first := time.Now().UTC().Truncate(time.Second).Format(time.RFC3339)
	s.underKills(t, rnd, lives, n, func(i int) string {
		if i%2 == 0 {
			return `{"spec":{"runStrategy":"Halted"}}`
		}
		return `{"spec":{"runRequestedAt":"` + first + `"}}`
	})
	c = s.startController(t)
	s.powered(t, n, func(i int) (bool, int32) { return i%2 == 1, int32(i % 2) }, original)

	// Halted survives a controller restart: the new controller reconciles each halted VM (a
	// spec change it records) and starts none.
	c.kill()
	c = s.startController(t)
	for i := 0; i < n; i += 2 {
		s.pokeVM(t, vmName(i))
	}
	s.powered(t, n, func(i int) (bool, int32) { return i%2 == 1, int32(i % 2) }, nil)
	c.kill()

	second := time.Now().UTC().Truncate(time.Second).Add(time.Second).Format(time.RFC3339)
	s.underKills(t, rnd, lives, n, func(i int) string {
		if i%2 == 0 {
			return `{"spec":{"runStrategy":"Always"}}`
		}
		return `{"spec":{"runRequestedAt":"` + second + `"}}`
	})
	c = s.startController(t)
	s.powered(t, n, func(i int) (bool, int32) { return true, int32(i%2) * 2 }, nil)
	// Made: the first pods, a new one per restart (two each for the odd VMs) and one per start;
	// removed: one per stop and one per restart.
	s.wantPodCounts(t, n+n/2*3, n/2*3)
	if !c.alive() {
		t.Fatal("the last controller exited")
	}
}

func vmName(i int) string { return fmt.Sprintf("pw-%02d", i) }

// underKills sends each VM its patch, as vmctl does (a merge patch under field manager vmctl),
// spread over the controller's lives. Every other life is killed at a random moment of its
// life, the others just after they made or removed their first pod, in the middle of the work.
func (s *scene) underKills(t *testing.T, rnd *rand.Rand, lives, n int, patch func(i int) string) {
	t.Helper()
	s.killsWhile(t, rnd, lives, n, func(i int) error {
		vm := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: vmName(i)}}
		return env.Client.Patch(context.Background(), vm, client.RawPatch(types.MergePatchType, []byte(patch(i))), client.FieldOwner("vmctl"))
	})
}

// killsWhile does act for each of the n VMs, a share of them in each of lives controller
// lives, and kills each life at random or just as it makes or removes pods; most lives must
// have been at work when killed.
func (s *scene) killsWhile(t *testing.T, rnd *rand.Rand, lives, n int, act func(i int) error) {
	t.Helper()
	per := (n + lives - 1) / lives
	busy := 0 // lives that made or removed pods
	for life := range lives {
		added, deleted := s.podCounts()
		c := s.startController(t)
		var wg sync.WaitGroup
		for i := life * per; i < min(n, (life+1)*per); i++ {
			wg.Go(func() {
				if err := act(i); err != nil {
					t.Errorf("%s: %v", vmName(i), err)
				}
			})
		}
		wg.Wait()
		how := "at random"
		if life%2 == 0 {
			time.Sleep(time.Duration(rnd.Int64N(int64(1500 * time.Millisecond))))
		} else {
			how = "while stopping or replacing pods"
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				if a, d := s.podCounts(); a+d > added+deleted {
					break
				}
			}
			time.Sleep(time.Duration(rnd.Int64N(int64(100 * time.Millisecond))))
		}
		c.kill()
		a, d := s.podCounts()
		if a+d > added+deleted {
			busy++
		}
		t.Logf("life %d: killed %s; %d pods made and %d removed", life, how, a-added, d-deleted)
	}
	if busy < lives/2 {
		t.Fatalf("only %d of %d lives made or removed pods: the kills did not hit a working controller", busy, lives)
	}
}

// powered waits until each VM runs (in a pod other than before, when before is given) or is
// Stopped without a pod, with the user restarts given, and no crash restart.
func (s *scene) powered(t *testing.T, n int, want func(i int) (runs bool, userRestarts int32), before map[string]types.UID) {
	t.Helper()
	kubeapi.Eventually(t, "every VM running or stopped as asked", 2*time.Minute, func() error {
		for i := range n {
			vm := getVM(t, s.ns, vmName(i))
			runs, users := want(i)
			st := vm.Status
			if st.UserRestartCount != users || st.RestartCount != 0 {
				return fmt.Errorf("%s: %d user restarts and %d restarts, want %d and 0", vm.Name, st.UserRestartCount, st.RestartCount, users)
			}
			pod, err := getPod(s.ns, vm.Name)
			if !runs {
				if st.Phase != vmv1.PhaseStopped || st.PodUID != "" || !apierrors.IsNotFound(err) {
					return fmt.Errorf("%s: phase %s, podUID %q, pod %v; want Stopped without a pod", vm.Name, st.Phase, st.PodUID, err)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("%s: %v", vm.Name, err)
			}
			if before != nil && pod.UID == before[vm.Name] {
				return fmt.Errorf("%s: still in its first pod", vm.Name)
			}
			if err := running(vm, pod, 0); err != nil {
				return err
			}
		}
		return nil
	})
}

// pokeVM changes a VM's spec and waits until the controller has recorded the new generation.
func (s *scene) pokeVM(t *testing.T, name string) {
	t.Helper()
	vm := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name}}
	grace := *getVM(t, s.ns, name).Spec.TerminationGracePeriodSeconds + 1
	if err := env.Client.Patch(context.Background(), vm, client.RawPatch(types.MergePatchType,
		fmt.Appendf(nil, `{"spec":{"terminationGracePeriodSeconds":%d}}`, grace))); err != nil {
		t.Fatal(err)
	}
	kubeapi.Eventually(t, name+" reconciled", time.Minute, func() error {
		if got := getVM(t, s.ns, name).Status.ObservedGeneration; got < vm.Generation {
			return fmt.Errorf("observedGeneration %d, want %d", got, vm.Generation)
		}
		return nil
	})
}
