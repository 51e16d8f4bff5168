package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestSnapshotRestoreUnderControllerKills: running VMs on claims are snapshotted, then, stopped,
// restored from their snapshots, while the controller is SIGKILLed again and again; the
// simulated node plays the node agent and the copier pods. Afterwards each snapshot succeeded
// once with its one claim, each restore succeeded with its one new claim, which the VM names,
// the claim it replaced is the restore's, no copier pod is left, and no claim is there that
// none of them accounts for; started again, each VM runs in exactly one pod.
func TestSnapshotRestoreUnderControllerKills(t *testing.T) {
	const n, lives = 12, 6
	rnd := rand.New(rand.NewPCG(faultSeed(t), 3))
	s := newScene(t, "snap-1", "snap-2")
	s.kubelets.PlaySnapshots()
	ctx := context.Background()
	for i := range n {
		if err := kubeapi.BoundClaim(ctx, env.Client, s.ns, vmName(i)+"-root"); err != nil {
			t.Fatal(err)
		}
		s.createVM(ctx, t, vmName(i), func(vm *vmv1.VirtualMachine) {
			vm.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: vm.Name + "-root"}
		})
	}
	c := s.startController(t)
	s.converged(t, n, time.Minute, nil)
	c.kill()

	// Snapshots of the running guests, made while the controller dies again and again.
	s.killsWhile(t, rnd, lives, n, func(i int) error {
		return create(ctx, &vmv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: snapName(i)},
			Spec: vmv1.VirtualMachineSnapshotSpec{VMName: vmName(i)}})
	})
	c = s.startController(t)
	kubeapi.Eventually(t, "every snapshot succeeded", 2*time.Minute, func() error {
		for i := range n {
			snap := &vmv1.VirtualMachineSnapshot{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: snapName(i)}, snap); err != nil {
				return err
			}
			st := snap.Status
			if st.Phase != vmv1.SnapshotSucceeded || len(st.Disks) != 1 || st.Disks[0].ClaimName != snapName(i)+"-root" || st.Consistency != vmv1.ConsistencyGuestFrozen {
				return fmt.Errorf("%s: %+v", snap.Name, st)
			}
			if l := getVM(t, s.ns, vmName(i)).Status.LastSnapshot; l == nil || l.Name != snap.Name {
				return fmt.Errorf("%s's lastSnapshot %+v", vmName(i), l)
			}
		}
		return s.noCopiers(ctx)
	})

	// Stopped, then restored from its snapshot under kills.
	for i := range n {
		patchVM(t, s.ns, vmName(i), `{"spec":{"runStrategy":"Halted"}}`)
	}
	kubeapi.Eventually(t, "every VM stopped", time.Minute, func() error {
		for i := range n {
			if st := getVM(t, s.ns, vmName(i)).Status; st.Phase != vmv1.PhaseStopped || st.PodUID != "" {
				return fmt.Errorf("%s: phase %s, pod %q", vmName(i), st.Phase, st.PodUID)
			}
		}
		return nil
	})
	c.kill()
	s.killsWhile(t, rnd, lives, n, func(i int) error {
		return create(ctx, &vmv1.VirtualMachineRestore{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "restore-" + vmName(i)},
			Spec: vmv1.VirtualMachineRestoreSpec{SnapshotName: snapName(i), VMName: vmName(i)}})
	})
	c = s.startController(t)
	kubeapi.Eventually(t, "every restore succeeded, each VM on its one new claim", 2*time.Minute, func() error {
		want := map[string]string{} // claim → who accounts for it
		for i := range n {
			rs := &vmv1.VirtualMachineRestore{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "restore-" + vmName(i)}, rs); err != nil {
				return err
			}
			if rs.Status.Phase != vmv1.SnapshotSucceeded || len(rs.Status.Claims) != 1 || rs.Status.Clone {
				return fmt.Errorf("%s: %+v", rs.Name, rs.Status)
			}
			c := rs.Status.Claims[0]
			if got := getVM(t, s.ns, vmName(i)).Spec.Guest.ClaimNames(); !slices.Equal(got, []string{c.ClaimName}) || c.Replaced != vmName(i)+"-root" {
				return fmt.Errorf("%s names %v; the restore made %s in place of %s", vmName(i), got, c.ClaimName, c.Replaced)
			}
			old := &corev1.PersistentVolumeClaim{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: c.Replaced}, old); err != nil {
				return err
			}
			if !slices.ContainsFunc(old.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == rs.UID }) {
				return fmt.Errorf("the replaced claim %s is not the restore's: %v", c.Replaced, old.OwnerReferences)
			}
			want[c.ClaimName], want[c.Replaced], want[snapName(i)+"-root"] = rs.Name, rs.Name+" (replaced)", snapName(i)
		}
		claims := &corev1.PersistentVolumeClaimList{}
		if err := env.Client.List(ctx, claims, client.InNamespace(s.ns)); err != nil {
			return err
		}
		for _, c := range claims.Items {
			if _, ok := want[c.Name]; !ok {
				return fmt.Errorf("claim %s is none of the snapshots' and restores' (an orphan)", c.Name)
			}
			if c.DeletionTimestamp != nil {
				return fmt.Errorf("claim %s (%s's) is being deleted", c.Name, want[c.Name])
			}
		}
		if len(claims.Items) != 3*n {
			return fmt.Errorf("%d claims, want %d", len(claims.Items), 3*n)
		}
		return s.noCopiers(ctx)
	})
	c.kill()

	// One usable VM each: started, each runs in exactly one pod, on its restored claim (bound
	// as a provisioner binds it: envtest runs none).
	s.bindClaims(t)
	c = s.startController(t)
	for i := range n {
		patchVM(t, s.ns, vmName(i), `{"spec":{"runStrategy":"Always"}}`)
	}
	s.converged(t, n, time.Minute, nil)
	if !c.alive() {
		t.Fatal("the last controller exited")
	}
}

func snapName(i int) string { return fmt.Sprintf("snap-%02d", i) }

// create makes o, which may exist already (a retry).
func create(ctx context.Context, o client.Object) error {
	if err := env.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// noCopiers says whether any copier pod is left in the scene.
func (s *scene) noCopiers(ctx context.Context) error {
	pods := &corev1.PodList{}
	if err := env.Client.List(ctx, pods, client.InNamespace(s.ns), client.HasLabels{vmv1.LabelCopierOf}); err != nil {
		return err
	}
	if len(pods.Items) > 0 {
		return fmt.Errorf("copier pod %s is left (%s)", pods.Items[0].Name, pods.Items[0].Status.Phase)
	}
	return nil
}

func patchVM(t *testing.T, ns, name, patch string) {
	t.Helper()
	vm := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := env.Client.Patch(context.Background(), vm, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// bindClaims binds every Pending claim of the scene, as a provisioner would.
func (s *scene) bindClaims(t *testing.T) {
	t.Helper()
	claims := &corev1.PersistentVolumeClaimList{}
	if err := env.Client.List(context.Background(), claims, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	for i := range claims.Items {
		c := &claims.Items[i]
		if c.Status.Phase == corev1.ClaimBound {
			continue
		}
		c.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: c.Spec.Resources.Requests}
		if err := env.Client.Status().Update(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
}
