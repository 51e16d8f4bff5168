package migration

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/migratable"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// Claims one node at a time attaches move with the guest: each is copied into a claim made for
// the target (podspec.TargetClaim), which the target pod mounts in its place; once the guest
// runs there, the VM names the target claims, and the source's become the migration's, deleted
// with it (docs/api.md, Live migration).

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachines,verbs=patch

// planClaims is what the migration copies of the guest running in source: each claim the
// guest's disks are on that only one node attaches, into the claim spec.claims names for its
// disk, or else one the migration makes (podspec.TargetClaimName). why says what in
// spec.claims cannot be done ("" when all can).
func planClaims(mig *vmv1.VirtualMachineMigration, source *corev1.Pod) (claims []vmv1.MigratedClaim, why string) {
	claims = migratable.CopiedClaims(source)
	var disks []string
	for i := range claims {
		claims[i].Target = podspec.TargetClaimName(claims[i].Source, mig.UID)
		disks = append(disks, claims[i].Disk)
	}
	for i, want := range mig.Spec.Claims {
		j := slices.IndexFunc(claims, func(c vmv1.MigratedClaim) bool { return c.Disk == want.Disk })
		switch {
		case j < 0:
			return nil, fmt.Sprintf("spec.claims[%d]: disk %s is not on a claim this migration copies (it copies %v: writable claims only one node attaches); name one of those", i, want.Disk, disks)
		case want.ClaimName == claims[j].Source:
			return nil, fmt.Sprintf("spec.claims[%d]: claim %s is the one disk %s is on now; name a new, empty claim", i, want.ClaimName, want.Disk)
		}
		claims[j].Target = want.ClaimName
	}
	return claims, ""
}

// chosen says whether target is a claim spec.claims names, which the user made.
func chosen(mig *vmv1.VirtualMachineMigration, target string) bool {
	return slices.ContainsFunc(mig.Spec.Claims, func(c vmv1.ClaimTarget) bool { return c.ClaimName == target })
}

// makeTargetClaims creates the claims mig.Status.Claims names for the target, each from its
// source claim, except those spec.claims names, which must exist; refused is why one cannot be
// had (the API server's words when it refuses one: a quota, a class it does not know), which
// fails the migration.
func (r *Reconciler) makeTargetClaims(ctx context.Context, mig *vmv1.VirtualMachineMigration) (refused string, err error) {
	for _, c := range mig.Status.Claims {
		if chosen(mig, c.Target) {
			if got, err := r.claim(ctx, mig.Namespace, c.Target); err != nil {
				return "", err
			} else if got == nil {
				return fmt.Sprintf("spec.claims: claim %s for disk %s does not exist in namespace %s: create it, empty and at least as large as claim %s, then migrate again", c.Target, c.Disk, mig.Namespace, c.Source), nil
			}
			continue
		}
		src := &corev1.PersistentVolumeClaim{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: mig.Namespace, Name: c.Source}, src); apierrors.IsNotFound(err) {
			return fmt.Sprintf("claim %s of disk %s is gone: nothing to copy", c.Source, c.Disk), nil
		} else if err != nil {
			return "", err
		}
		target := podspec.TargetClaim(src, mig)
		if err := r.Client.Create(ctx, target); apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return fmt.Sprintf("the API server refused claim %s for disk %s on the target: %v", target.Name, c.Disk, err), nil
		} else if err != nil && !apierrors.IsAlreadyExists(err) {
			return "", err
		}
	}
	return "", nil
}

// repointVM makes the VM's spec name the target claims in place of the source's, guarded by
// the VM's resourceVersion, before the VM's status names the target pod: a guest that restarts
// from then on starts from the claims that hold its disks now. Repeatable; returns the VM as
// it is then.
func (r *Reconciler) repointVM(ctx context.Context, vm *vmv1.VirtualMachine, claims []vmv1.MigratedClaim) (*vmv1.VirtualMachine, error) {
	if len(claims) == 0 {
		return vm, nil
	}
	moved := vm.DeepCopy()
	to := map[string]string{}
	for _, c := range claims {
		to[c.Source] = c.Target
	}
	g := &moved.Spec.Guest
	if c := g.RootDisk.PersistentVolumeClaim; c != nil && to[c.ClaimName] != "" {
		c.ClaimName = to[c.ClaimName]
	}
	for i := range g.Disks {
		if c := g.Disks[i].PersistentVolumeClaim; c != nil && to[c.ClaimName] != "" {
			c.ClaimName = to[c.ClaimName]
		}
	}
	if slices.Equal(moved.Spec.Guest.ClaimNames(), vm.Spec.Guest.ClaimNames()) {
		return vm, nil
	}
	return moved, r.Client.Patch(ctx, moved, client.MergeFromWithOptions(vm, client.MergeFromWithOptimisticLock{}))
}

// settleClaims leaves the claims as the migration's end says. Succeeded: the target claims are
// the VM's (the migration no longer owns them) and the source claims the migration's (deleted
// with it). Failed: the target claims, which hold partial copies, are deleted. Repeatable.
func (r *Reconciler) settleClaims(ctx context.Context, mig *vmv1.VirtualMachineMigration) error {
	for _, c := range mig.Status.Claims {
		target, err := r.claim(ctx, mig.Namespace, c.Target)
		if err != nil {
			return err
		}
		if mig.Status.Phase != vmv1.MigrationSucceeded {
			if target != nil && madeBy(target, mig) && target.DeletionTimestamp == nil {
				if err := r.Client.Delete(ctx, target, client.Preconditions{UID: &target.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
					return err
				}
			}
			continue
		}
		if target != nil && metav1.IsControlledBy(target, mig) {
			kept := target.DeepCopy()
			kept.OwnerReferences = slices.DeleteFunc(kept.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == mig.UID })
			if err := r.Client.Patch(ctx, kept, client.MergeFrom(target)); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
		source, err := r.claim(ctx, mig.Namespace, c.Source)
		if err != nil {
			return err
		}
		if source != nil && !slices.ContainsFunc(source.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == mig.UID }) {
			released := source.DeepCopy()
			released.OwnerReferences = append(released.OwnerReferences, metav1.OwnerReference{APIVersion: vmv1.GroupVersion.String(),
				Kind: "VirtualMachineMigration", Name: mig.Name, UID: mig.UID})
			if err := r.Client.Patch(ctx, released, client.MergeFrom(source)); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
	}
	return nil
}

// madeBy says whether claim is one mig made for its target.
func madeBy(claim *corev1.PersistentVolumeClaim, mig *vmv1.VirtualMachineMigration) bool {
	return claim.Annotations[vmv1.AnnotationMigration] == string(mig.UID)
}

// claim reads a claim from the cache, and one the cache lacks from the server: a target claim
// made a moment ago (start) may not be in the cache yet, and a failed migration would leave it.
func (r *Reconciler) claim(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	c := &corev1.PersistentVolumeClaim{}
	key := types.NamespacedName{Namespace: namespace, Name: name}
	err := r.Client.Get(ctx, key, c)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, c)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return c, err
}
