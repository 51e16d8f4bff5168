package migration_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// onClaims gives the VM its root disk and a data disk on ReadWriteOnce claims of 2Gi, bound.
func onClaims(t *testing.T, ns string) func(*vmv1.VirtualMachine) {
	for _, name := range []string{"web-root", "web-data"} {
		claim(t, ns, name)
		pvc := getClaim(t, ns, name)
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resourceQ("2Gi")}
		if err := env.Client.Status().Update(context.Background(), pvc); err != nil {
			t.Fatal(err)
		}
	}
	return func(v *vmv1.VirtualMachine) {
		v.Spec.Guest.RootDisk = vmv1.RootDisk{Image: v.Spec.Guest.RootDisk.Image, PersistentVolumeClaim: &vmv1.RootDiskClaim{ClaimName: "web-root"}}
		v.Spec.Guest.Disks = []vmv1.Disk{{Name: "data", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "web-data"}}}
	}
}

// succeed plays a migration to its success: the target bound to node, its runner waiting, the
// stream sent, the guest started there.
func succeed(t *testing.T, mig *vmv1.VirtualMachineMigration, source, tgt *corev1.Pod, node string) *vmv1.VirtualMachineMigration {
	t.Helper()
	env.Bind(t, tgt, node)
	env.Kubelet(t, tgt, waiting("10.244.1.9"))
	sending(t, source, tgt)
	state(t, source, controlapi.MigrationCompleted, 300<<20, 300<<20, 42, "")
	env.Kubelet(t, tgt, started("10.244.1.9"))
	return ended(t, mig, vmv1.MigrationSucceeded, vmv1.ReasonSucceeded)
}

func getClaim(t *testing.T, ns, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, pvc); err != nil {
		t.Fatal(err)
	}
	return pvc
}

func ownedBy(pvc *corev1.PersistentVolumeClaim, mig *vmv1.VirtualMachineMigration) bool {
	return slices.ContainsFunc(pvc.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == mig.UID })
}

// TestMigrationCopiesClaims: a VM whose disks are on claims only one node attaches is migratable;
// its migration makes a claim for the target in place of each (the source's capacity, its modes,
// owned by the migration), which the target pod mounts; once the guest runs there the VM names
// the new claims, they are the VM's, and the old ones are the migration's (deleted with it).
// A migration that fails deletes the claims it made; the VM keeps its own.
func TestMigrationCopiesClaims(t *testing.T) {
	ns := namespace(t)
	n1, n2 := node(t, "a"), node(t, "b")
	vm, source := runningVM(t, ns, "web", n1, onClaims(t, ns))
	if c := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionMigratable); c.Status != metav1.ConditionTrue {
		t.Fatalf("Migratable %+v, want True: the claims are copied", c)
	}

	// A migration whose target dies: the claims it made go, the VM's stay as they were.
	failed := migrate(t, vm, "first", nil)
	tgt := target(t, failed)
	failed = getMig(t, failed)
	made := failed.Status.Claims
	if len(made) != 2 || made[0].Disk != "root" || made[0].Source != "web-root" || made[0].Target != podspec.TargetClaimName("web-root", failed.UID) ||
		made[1].Disk != "data" || made[1].Source != "web-data" {
		t.Fatalf("status.claims %+v", made)
	}
	for _, c := range made {
		pvc := getClaim(t, ns, c.Target)
		if !metav1.IsControlledBy(pvc, failed) || pvc.Spec.Resources.Requests.Storage().String() != "2Gi" || !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
			t.Fatalf("target claim %s: owners %v, spec %+v", c.Target, pvc.OwnerReferences, pvc.Spec)
		}
	}
	mounted := map[string]string{}
	for _, v := range tgt.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			mounted[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
	}
	if mounted["root-claim"] != made[0].Target || mounted["disk-data"] != made[1].Target {
		t.Fatalf("target pod's claims %v, want the target claims %+v", mounted, made)
	}
	env.Bind(t, tgt, n2)
	env.Kubelet(t, tgt, failedPod)
	ended(t, failed, vmv1.MigrationFailed, vmv1.ReasonTargetFailed)
	for _, c := range made {
		eventually(t, "the failed migration's claim "+c.Target+" deleted", func() error {
			pvc := &corev1.PersistentVolumeClaim{}
			err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: c.Target}, pvc)
			if apierrors.IsNotFound(err) || err == nil && pvc.DeletionTimestamp != nil {
				return nil // the API server's pvc-protection finalizer waits for a controller-manager
			}
			return fmt.Errorf("still there (%v)", err)
		})
		if src := getClaim(t, ns, c.Source); ownedBy(src, failed) {
			t.Errorf("source claim %s owned by the failed migration", c.Source)
		}
	}
	if v := getVM(t, vm); !slices.Equal(v.Spec.Guest.ClaimNames(), []string{"web-root", "web-data"}) {
		t.Fatalf("VM claims after a failed migration: %v", v.Spec.Guest.ClaimNames())
	}

	// The next one succeeds.
	source = unmarked(t, source)
	mig := migrate(t, vm, "second", nil)
	tgt = target(t, mig)
	got := succeed(t, mig, source, tgt, n2)
	want := []string{got.Status.Claims[0].Target, got.Status.Claims[1].Target}
	if v := getVM(t, vm); !slices.Equal(v.Spec.Guest.ClaimNames(), want) || v.Status.PodName != tgt.Name {
		t.Fatalf("VM after the move: claims %v pod %s, want claims %v pod %s", v.Spec.Guest.ClaimNames(), v.Status.PodName, want, tgt.Name)
	}
	eventually(t, "claims settled", func() error {
		for _, c := range got.Status.Claims {
			if pvc := getClaim(t, ns, c.Target); ownedBy(pvc, got) {
				return fmt.Errorf("target claim %s still owned by the migration", c.Target)
			}
			if pvc := getClaim(t, ns, c.Source); !ownedBy(pvc, got) || metav1.IsControlledBy(pvc, got) {
				return fmt.Errorf("source claim %s owners %v, want the migration (not as controller)", c.Source, pvc.OwnerReferences)
			}
		}
		return nil
	})
	// The VM controller runs the moved guest on its new claims.
	eventually(t, "VM follows the target", func() error {
		v := getVM(t, vm)
		if c := meta.FindStatusCondition(v.Status.Conditions, vmv1.ConditionMigratable); v.Status.Phase != vmv1.PhaseRunning || c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("status %+v", v.Status)
		}
		return nil
	})
}

// TestMigrationOntoChosenClaims: spec.claims moves a disk onto a claim the user made (storage
// migration), here within the guest's node (spec.targetNode its own): the target pod is pinned
// there and mounts the claim, the VM names it after the move, and it is never the migration's
// to delete; what cannot be done is refused naming the field and the fix.
func TestMigrationOntoChosenClaims(t *testing.T) {
	ns := namespace(t)
	n1 := node(t, "a")
	vm, source := runningVM(t, ns, "web", n1, onClaims(t, ns))
	claim(t, ns, "web-data-2")

	for _, tc := range []struct {
		name, reason, words string
		claims              []vmv1.ClaimTarget
	}{
		{"no such disk", vmv1.ReasonNotMigratable, "spec.claims[0]: disk scratch is not on a claim this migration copies (it copies [root data]", []vmv1.ClaimTarget{{Disk: "scratch", ClaimName: "x"}}},
		{"the disks own claim", vmv1.ReasonNotMigratable, "spec.claims[0]: claim web-data is the one disk data is on now; name a new, empty claim", []vmv1.ClaimTarget{{Disk: "data", ClaimName: "web-data"}}},
		{"no such claim", vmv1.ReasonTargetFailed, "spec.claims: claim nothing for disk data does not exist in namespace " + ns + ": create it", []vmv1.ClaimTarget{{Disk: "data", ClaimName: "nothing"}}},
	} {
		mig := migrate(t, vm, "refused-"+strings.ReplaceAll(tc.name, " ", "-"), func(m *vmv1.VirtualMachineMigration) { m.Spec.Claims = tc.claims })
		got := ended(t, mig, vmv1.MigrationFailed, tc.reason)
		if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionCompleted); !strings.Contains(c.Message, tc.words) {
			t.Errorf("%s: Completed %q, want %q", tc.name, c.Message, tc.words)
		}
		source = unmarked(t, source)
	}

	// A storage migration: the guest stays on its node, its data disk moves onto the chosen claim.
	mig := migrate(t, vm, "onto", func(m *vmv1.VirtualMachineMigration) {
		m.Spec.TargetNode = n1
		m.Spec.Claims = []vmv1.ClaimTarget{{Disk: "data", ClaimName: "web-data-2"}}
	})
	tgt := target(t, mig)
	if terms := tgt.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms; len(terms) != 1 || len(terms[0].MatchFields) != 1 ||
		terms[0].MatchFields[0].Operator != corev1.NodeSelectorOpIn || !slices.Equal(terms[0].MatchFields[0].Values, []string{n1}) {
		t.Fatalf("target pod's node terms %+v, want metadata.name In [%s]", terms, n1)
	}
	mig = getMig(t, mig)
	if c := mig.Status.Claims; len(c) != 2 || c[1] != (vmv1.MigratedClaim{Disk: "data", Source: "web-data", Target: "web-data-2"}) || c[0].Target != podspec.TargetClaimName("web-root", mig.UID) {
		t.Fatalf("status.claims %+v", c)
	}
	for _, v := range tgt.Spec.Volumes {
		if v.Name == "disk-data" && v.PersistentVolumeClaim.ClaimName != "web-data-2" {
			t.Fatalf("target pod's data disk on %s, want web-data-2", v.PersistentVolumeClaim.ClaimName)
		}
	}
	got := succeed(t, mig, source, tgt, n1)
	if got.Status.SourceNode != n1 || got.Status.TargetNode != n1 {
		t.Errorf("moved from %s to %s, want within %s", got.Status.SourceNode, got.Status.TargetNode, n1)
	}
	if names := getVM(t, vm).Spec.Guest.ClaimNames(); !slices.Equal(names, []string{got.Status.Claims[0].Target, "web-data-2"}) {
		t.Fatalf("VM claims after the move: %v", names)
	}
	eventually(t, "the old data claim the migration's", func() error {
		if !ownedBy(getClaim(t, ns, "web-data"), got) {
			return fmt.Errorf("web-data not owned by the migration")
		}
		return nil
	})
	if c := getClaim(t, ns, "web-data-2"); ownedBy(c, got) || c.DeletionTimestamp != nil {
		t.Errorf("the chosen claim: owners %v, deleting %v", c.OwnerReferences, c.DeletionTimestamp)
	}
}
