package migration_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/migration"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// TestMigrationDeletedMidway: deleting a running migration cancels the transfer (migrate-to
// removed), deletes the target and lets the migration go (finalizer dropped).
func TestMigrationDeletedMidway(t *testing.T) {
	ns := namespace(t)
	n1, n2 := node(t, "a"), node(t, "b")
	vm, source := runningVM(t, ns, "web", n1, nil)
	mig := migrate(t, vm, "move", nil)
	tgt := target(t, mig)
	env.Bind(t, tgt, n2)
	env.Kubelet(t, tgt, waiting("10.244.1.9"))
	sending(t, source, tgt)
	state(t, source, controlapi.MigrationActive, 1<<20, 300<<20, 0, "")
	if f := getMig(t, mig).Finalizers; len(f) != 1 || f[0] != vmv1.MigrationFinalizer {
		t.Fatalf("finalizers %v", f)
	}
	if err := env.Client.Delete(context.Background(), mig); err != nil {
		t.Fatal(err)
	}
	gone(t, ns, tgt.Name)
	unmarked(t, source)
	eventually(t, "migration released", func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(mig), &vmv1.VirtualMachineMigration{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	if v := getVM(t, vm); v.Status.PodName != source.Name || v.Status.Phase != vmv1.PhaseRunning {
		t.Errorf("VM status %+v, want still running in %s", v.Status, source.Name)
	}
}

// TestSentGuestIsNeverDropped: once the source has sent everything (it is paused), neither a
// delete of the migration nor its deadline ends it — only the target's start or death: dying,
// the source is told to resume, so the guest runs on exactly one side.
func TestSentGuestIsNeverDropped(t *testing.T) {
	ns := namespace(t)
	n1, n2 := node(t, "a"), node(t, "b")
	vm, source := runningVM(t, ns, "web", n1, nil)
	mig := migrate(t, vm, "move", func(m *vmv1.VirtualMachineMigration) { m.Spec.CompletionTimeoutSeconds = 30 })
	tgt := target(t, mig)
	env.Bind(t, tgt, n2)
	env.Kubelet(t, tgt, waiting("10.244.1.9"))
	sending(t, source, tgt)
	state(t, source, controlapi.MigrationCompleted, 300<<20, 300<<20, 40, "")
	eventually(t, "waiting for the target", func() error {
		if st := getMig(t, mig).Status; st.TotalBytes != 300<<20 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	clock.Advance(31 * 1e9)
	if err := env.Client.Delete(context.Background(), mig); err != nil {
		t.Fatal(err)
	}
	// The controller reconciles the delete; nothing may be torn down.
	annotate(t, tgt, "test/poke", "1")
	eventually(t, "delete seen", func() error {
		if getMig(t, mig).DeletionTimestamp == nil {
			return fmt.Errorf("not deleting yet")
		}
		return nil
	})
	if p, _ := getPod(ns, tgt.Name); p.DeletionTimestamp != nil {
		t.Fatal("the target of a completed send was deleted before it started or died")
	}
	if got := getMig(t, mig); got.Status.Terminal() {
		t.Fatalf("ended while the target loads the guest: %+v", got.Status)
	}
	env.Kubelet(t, tgt, failedPod)
	eventually(t, "source told to resume", func() error {
		p, err := getPod(ns, source.Name)
		if err != nil {
			return err
		}
		if p.Annotations[vmv1.AnnotationMigrationResume] != "true" || p.Annotations[vmv1.AnnotationMigrateTo] != "" {
			return fmt.Errorf("annotations %v", p.Annotations)
		}
		return nil
	})
	eventually(t, "migration released", func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(mig), &vmv1.VirtualMachineMigration{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	if v := getVM(t, vm); v.Status.PodName != source.Name {
		t.Errorf("VM runs %s, want the source %s", v.Status.PodName, source.Name)
	}
}

// TestSecondMigrationRefused: a second migration of a VM that is moving is refused; the first
// goes on.
func TestSecondMigrationRefused(t *testing.T) {
	ns := namespace(t)
	n1 := node(t, "a")
	vm, _ := runningVM(t, ns, "web", n1, nil)
	first := migrate(t, vm, "first", nil)
	target(t, first)
	second := migrate(t, vm, "second", nil)
	ended(t, second, vmv1.MigrationFailed, vmv1.ReasonAlreadyMigrating)
	if st := getMig(t, first).Status; st.Terminal() {
		t.Errorf("the first migration ended: %+v", st)
	}
}

// TestDrain: a LiveMigrate VM gets a PodDisruptionBudget that holds evictions; cordoning its node
// makes the <vm>-evacuation migration; the budget goes with the strategy.
func TestDrain(t *testing.T) {
	ns := namespace(t)
	n1 := node(t, "a")
	vm, _ := runningVM(t, ns, "web", n1, func(v *vmv1.VirtualMachine) { v.Spec.EvictionStrategy = vmv1.EvictionLiveMigrate })
	pdb := &policyv1.PodDisruptionBudget{}
	key := types.NamespacedName{Namespace: ns, Name: migration.PDBName(vm.Name)}
	eventually(t, "budget", func() error { return env.Client.Get(context.Background(), key, pdb) })
	if !metav1.IsControlledBy(pdb, vm) || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 0 ||
		pdb.Spec.Selector.MatchLabels[podspec.LabelVMName] != vm.Name {
		t.Fatalf("budget %+v", pdb)
	}

	// Left alone: a VM that is not LiveMigrate on the same node, and a LiveMigrate one on a
	// node that is not cordoned (its budget shows the evacuator has seen it).
	other, _ := runningVM(t, ns, "other", n1, nil)
	n2 := node(t, "b")
	stay, _ := runningVM(t, ns, "stay", n2, func(v *vmv1.VirtualMachine) { v.Spec.EvictionStrategy = vmv1.EvictionLiveMigrate })
	eventually(t, "budget of the VM that stays", func() error {
		return env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: migration.PDBName(stay.Name)}, &policyv1.PodDisruptionBudget{})
	})

	cordon(t, n1, true)
	evac := &vmv1.VirtualMachineMigration{}
	eventually(t, "evacuation", func() error {
		return env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: migration.EvacuationName(vm.Name)}, evac)
	})
	if evac.Spec.VMName != vm.Name || !metav1.IsControlledBy(evac, vm) {
		t.Errorf("evacuation %+v", evac)
	}
	target(t, evac)
	for _, v := range []*vmv1.VirtualMachine{other, stay} {
		err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: migration.EvacuationName(v.Name)}, &vmv1.VirtualMachineMigration{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("an evacuation of %s, which is not LiveMigrate on a cordoned node (%v)", v.Name, err)
		}
	}

	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		v := getVM(t, vm)
		v.Spec.EvictionStrategy = vmv1.EvictionNone
		return env.Client.Update(context.Background(), v)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "budget removed", func() error {
		p := &policyv1.PodDisruptionBudget{}
		if err := env.Client.Get(context.Background(), key, p); !apierrors.IsNotFound(err) && p.DeletionTimestamp == nil {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

func cordon(t *testing.T, name string, on bool) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := env.Client.Get(context.Background(), types.NamespacedName{Name: name}, n); err != nil {
			return err
		}
		n.Spec.Unschedulable = on
		return env.Client.Update(context.Background(), n)
	}); err != nil {
		t.Fatal(err)
	}
}

// TestNoResizeWhileMigrating: the VM controller leaves a migrating guest's size alone (the
// target is a copy of the source at its size now), and resumes once the migration ends.
func TestNoResizeWhileMigrating(t *testing.T) {
	ns := namespace(t)
	n1 := node(t, "a")
	vm, source := runningVM(t, ns, "web", n1, func(v *vmv1.VirtualMachine) { v.Spec.Guest.MaxCPUs = ptrInt32(2) })
	mig := migrate(t, vm, "move", nil)
	target(t, mig)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		v := getVM(t, vm)
		v.Spec.Guest.CPUs = 2
		return env.Client.Update(context.Background(), v)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "edit reconciled", func() error {
		if v := getVM(t, vm); v.Status.ObservedGeneration != v.Generation {
			return fmt.Errorf("observedGeneration %d of %d", v.Status.ObservedGeneration, v.Generation)
		}
		return nil
	})
	if p, _ := getPod(ns, source.Name); p.Annotations[vmv1.AnnotationDesiredCPUs] != "" || p.Generation != source.Generation {
		t.Fatalf("the migrating source was resized: generation %d→%d, annotations %v", source.Generation, p.Generation, p.Annotations)
	}
	if c := meta.FindStatusCondition(getVM(t, vm).Status.Conditions, vmv1.ConditionResized); c != nil {
		t.Fatalf("a resize started during the migration: %+v", c)
	}
	if err := env.Client.Delete(context.Background(), mig); err != nil {
		t.Fatal(err)
	}
	eventually(t, "resize after the migration", func() error {
		if c := meta.FindStatusCondition(getVM(t, vm).Status.Conditions, vmv1.ConditionResized); c == nil {
			return fmt.Errorf("no Resized condition")
		}
		return nil
	})
}

func ptrInt32(v int32) *int32 { return &v }
