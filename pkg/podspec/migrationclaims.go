package podspec

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// AnnotationMigratedFrom, on a claim a migration made for its target, names the claim it copies.
const AnnotationMigratedFrom = "vm.virtpod.io/migrated-from"

// TargetClaimName is the claim a migration makes for its target in place of claim:
// <claim>-m<5 hex digits of the SHA-256 of the migration's UID and the claim>, deterministic so a
// repeated reconcile finds the claim it made, at most 253 characters (a claim name's limit). A
// claim a migration made loses its suffix before the next one appends its own, so names do not
// grow hop by hop.
func TargetClaimName(claim string, migration types.UID) string {
	return suffixedClaimName(claim, migration, movedSuffix, "-m")
}

// RestoredClaimName is the claim a restore copies a snapshot's disk into in place of claim:
// <claim>-r<5 hex digits>, as TargetClaimName names a migration's.
func RestoredClaimName(claim string, restore types.UID) string {
	return suffixedClaimName(claim, restore, restoredSuffix, "-r")
}

var (
	movedSuffix    = regexp.MustCompile(`-m[0-9a-f]{5}$`)
	restoredSuffix = regexp.MustCompile(`-r[0-9a-f]{5}$`)
)

// suffixedClaimName is claim without a suffix of its kind (old), then tag and 5 hex digits of
// the SHA-256 of uid and claim, at most 253 characters.
func suffixedClaimName(claim string, uid types.UID, old *regexp.Regexp, tag string) string {
	base := old.ReplaceAllString(claim, "")
	sum := sha256.Sum256([]byte(string(uid) + "/" + claim))
	suffixLen := len(tag) + 5
	if len(base) > 253-suffixLen {
		base = base[:253-suffixLen]
	}
	return base + tag + hex.EncodeToString(sum[:])[:5]
}

// TargetClaim renders the claim a migration makes for its target in place of src: the same
// storage class, access modes and volume mode, src's capacity (its request while unbound) as the
// request, so the target's copy of the disk fits, and no selector or data source (it is filled by
// the migration, not from a volume or snapshot). Labelled with the VM and the migration, owned by
// the migration until it succeeds. Pure.
func TargetClaim(src *corev1.PersistentVolumeClaim, mig *vmv1.VirtualMachineMigration) *corev1.PersistentVolumeClaim {
	size, ok := src.Status.Capacity[corev1.ResourceStorage]
	if !ok {
		size = src.Spec.Resources.Requests[corev1.ResourceStorage]
	}
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        TargetClaimName(src.Name, mig.UID),
			Namespace:   src.Namespace,
			Labels:      map[string]string{LabelVMName: mig.Spec.VMName},
			Annotations: map[string]string{AnnotationMigratedFrom: src.Name, vmv1.AnnotationMigration: string(mig.UID)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(mig,
				vmv1.GroupVersion.WithKind("VirtualMachineMigration"))},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      append([]corev1.PersistentVolumeAccessMode(nil), src.Spec.AccessModes...),
			StorageClassName: src.Spec.StorageClassName,
			VolumeMode:       src.Spec.VolumeMode,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	return c
}

// withTargetClaims points pod's claim volumes at the target claims mig made.
func withTargetClaims(spec *corev1.PodSpec, mig *vmv1.VirtualMachineMigration) {
	for _, c := range mig.Status.Claims {
		for i := range spec.Volumes {
			if v := spec.Volumes[i].PersistentVolumeClaim; v != nil && v.ClaimName == c.Source {
				v.ClaimName = c.Target
			}
		}
	}
}
