package snapshot

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/statuspatch"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// RestoreReconciler reconciles VirtualMachineRestores. It shares the snapshot reconciler's
// clients and helpers.
type RestoreReconciler struct{ *Reconciler }

// AnnotationRestoredFrom is on a VM a restore made (a clone): the restore's UID, so a repeated
// reconcile knows the VM as its own.
const AnnotationRestoredFrom = "vm.virtpod.io/restored-from"

// Reconcile moves one restore along: plan, copy, point the VM at the copies (or make the new
// VM), or fail and delete what it made.
func (r RestoreReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	rs := &vmv1.VirtualMachineRestore{}
	if err := r.Client.Get(ctx, req.NamespacedName, rs); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if rs.Status.Terminal() {
		return reconcile.Result{}, r.tidyRestore(ctx, rs)
	}
	if left := r.left(rs.Status.StartTime, rs.Spec.DeadlineSeconds); left <= 0 {
		return reconcile.Result{}, r.failRestore(ctx, rs, vmv1.ReasonTimeout, fmt.Sprintf("not done within spec.deadlineSeconds (%d s): what it made is deleted and the VM keeps its disks", deadline(rs.Spec.DeadlineSeconds)/time.Second))
	}
	snap := &vmv1.VirtualMachineSnapshot{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: rs.Namespace, Name: rs.Spec.SnapshotName}, snap); apierrors.IsNotFound(err) {
		return reconcile.Result{}, r.failRestore(ctx, rs, vmv1.ReasonSnapshotNotReady, fmt.Sprintf("VirtualMachineSnapshot %s does not exist in namespace %s", rs.Spec.SnapshotName, rs.Namespace))
	} else if err != nil {
		return reconcile.Result{}, err
	}
	switch snap.Status.Phase {
	case vmv1.SnapshotFailed:
		return reconcile.Result{}, r.failRestore(ctx, rs, vmv1.ReasonSnapshotNotReady, fmt.Sprintf("snapshot %s failed: nothing to restore", snap.Name))
	case vmv1.SnapshotSucceeded:
	default:
		next := rs.DeepCopy()
		next.Status.Phase = vmv1.SnapshotPending
		setReady(&next.Status.Conditions, rs.Generation, metav1.ConditionFalse, vmv1.ReasonSnapshotNotReady, fmt.Sprintf("snapshot %s is not complete yet; the restore starts once it succeeded", snap.Name))
		return reconcile.Result{}, r.patchRestore(ctx, rs, next)
	}
	vm := &vmv1.VirtualMachine{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: rs.Namespace, Name: rs.Spec.VMName}, vm); apierrors.IsNotFound(err) {
		vm = nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if rs.Status.Phase != vmv1.SnapshotInProgress {
		if err := r.startRestore(ctx, rs, snap, vm); err != nil || rs.Status.Phase != vmv1.SnapshotInProgress {
			return reconcile.Result{}, err
		}
	}
	if err := r.followRestore(ctx, rs, snap, vm); err != nil || rs.Status.Terminal() {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: r.left(rs.Status.StartTime, rs.Spec.DeadlineSeconds)}, nil
}

// startRestore checks the target VM (the snapshot's own, stopped; or a name no VM has) and
// writes the plan: which claim each disk is copied into, and which it replaces.
func (r RestoreReconciler) startRestore(ctx context.Context, rs *vmv1.VirtualMachineRestore, snap *vmv1.VirtualMachineSnapshot, vm *vmv1.VirtualMachine) error {
	clone := vm == nil || vm.Annotations[AnnotationRestoredFrom] == string(rs.UID)
	switch {
	case vm != nil && !clone && vm.Name != snap.Spec.VMName:
		return r.failRestore(ctx, rs, vmv1.ReasonVMExists, fmt.Sprintf("VM %s exists and is not snapshot %s's VM (%s): name the snapshot's VM to restore it, or a new name to clone it", vm.Name, snap.Name, snap.Spec.VMName))
	case vm != nil && !clone && !vm.StoppedForRestore():
		return r.failRestore(ctx, rs, vmv1.ReasonVMRunning, runningMessage(vm))
	}
	if clone {
		src := &vmv1.VirtualMachine{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: rs.Namespace, Name: snap.Spec.VMName}, src); apierrors.IsNotFound(err) {
			return r.failRestore(ctx, rs, vmv1.ReasonVMNotFound, fmt.Sprintf("VM %s, which snapshot %s was taken of, is gone: a clone copies its spec", snap.Spec.VMName, snap.Name))
		} else if err != nil {
			return err
		}
	}
	next := rs.DeepCopy()
	now := metav1.NewTime(r.Now())
	next.Status.Phase, next.Status.StartTime, next.Status.Clone = vmv1.SnapshotInProgress, &now, clone
	next.Status.CopierPod = rs.Name + "-restore"
	next.Status.Claims = nil
	for _, d := range snap.Status.Disks {
		c := vmv1.RestoredClaim{Disk: d.Disk, From: d.ClaimName}
		if clone {
			c.ClaimName = podspec.SnapshotClaimName(rs.Spec.VMName, d.Disk)
		} else {
			c.Replaced = claimOfDisk(vm, d.Disk)
			if c.Replaced == "" {
				return r.failRestore(ctx, rs, vmv1.ReasonClaimRefused, fmt.Sprintf("VM %s no longer has disk %s on a claim: restore onto a VM with the snapshot's disks, or clone it under a new name", vm.Name, d.Disk))
			}
			c.ClaimName = podspec.RestoredClaimName(c.Replaced, rs.UID)
		}
		next.Status.Claims = append(next.Status.Claims, c)
	}
	setReady(&next.Status.Conditions, rs.Generation, metav1.ConditionFalse, vmv1.ReasonInProgress, fmt.Sprintf("copying snapshot %s's disks for VM %s", snap.Name, rs.Spec.VMName))
	if err := r.patchRestore(ctx, rs, next); err != nil {
		return err
	}
	r.Recorder.Eventf(rs, nil, corev1.EventTypeNormal, "Restoring", "Restore", "copying snapshot %s's disks for VM %s", snap.Name, rs.Spec.VMName)
	return nil
}

// followRestore makes the claims and the copier, and once the copier succeeded points the VM
// at the copies (or makes the clone).
func (r RestoreReconciler) followRestore(ctx context.Context, rs *vmv1.VirtualMachineRestore, snap *vmv1.VirtualMachineSnapshot, vm *vmv1.VirtualMachine) error {
	owner := *metav1.NewControllerRef(rs, vmv1.GroupVersion.WithKind("VirtualMachineRestore"))
	copier := podspec.Copier{Name: rs.Status.CopierPod, Namespace: rs.Namespace, Of: rs.Name, VMName: rs.Spec.VMName, Owner: owner, Args: []string{"disk-copy", "--require-marker"}}
	for _, c := range rs.Status.Claims {
		from, err := r.claim(ctx, rs.Namespace, c.From)
		if err != nil {
			return err
		}
		if from == nil {
			return r.failRestore(ctx, rs, vmv1.ReasonSnapshotNotReady, fmt.Sprintf("snapshot %s's claim %s of disk %s is gone", snap.Name, c.From, c.Disk))
		}
		size := podspec.ClaimSize(from)
		if refused, err := r.create(ctx, podspec.CopyClaim(c.ClaimName, rs.Spec.VMName, "", from, *resource.NewQuantity(size.Value(), resource.BinarySI), owner), c.Disk); err != nil {
			return err
		} else if refused != "" {
			return r.failRestore(ctx, rs, vmv1.ReasonClaimRefused, refused)
		}
		copier.Args = append(copier.Args, "--copy=from="+podspec.CopierDisk(c.From)+",to="+podspec.CopierDisk(c.ClaimName))
		copier.Claims = append(copier.Claims, podspec.CopierClaim{Name: c.From, ReadOnly: true}, podspec.CopierClaim{Name: c.ClaimName})
	}
	pod, err := r.pod(ctx, rs.Namespace, rs.Status.CopierPod)
	if err != nil {
		return err
	}
	if pod == nil {
		if copier.Image, err = r.copierImage(ctx, snap); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, podspec.CopierPod(copier)); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	}
	switch pod.Status.Phase {
	case corev1.PodFailed:
		return r.failRestore(ctx, rs, vmv1.ReasonCopyFailed, "copier pod "+pod.Name+" failed: "+terminationMessage(pod))
	case corev1.PodSucceeded:
		if rs.Status.Clone {
			return r.makeClone(ctx, rs, snap, vm)
		}
		return r.repoint(ctx, rs, vm)
	}
	return nil
}

// repoint makes the stopped VM's spec name the restored claims, guarded by its resourceVersion;
// the claims it replaced become the restore's (deleted with it).
func (r RestoreReconciler) repoint(ctx context.Context, rs *vmv1.VirtualMachineRestore, vm *vmv1.VirtualMachine) error {
	if vm == nil {
		return r.failRestore(ctx, rs, vmv1.ReasonVMNotFound, fmt.Sprintf("VM %s was deleted during the restore", rs.Spec.VMName))
	}
	to := map[string]string{}
	for _, c := range rs.Status.Claims {
		to[c.Replaced] = c.ClaimName
	}
	next := vm.DeepCopy()
	renameClaims(&next.Spec.Guest, to)
	if !slices.Equal(next.Spec.Guest.ClaimNames(), vm.Spec.Guest.ClaimNames()) {
		if !vm.StoppedForRestore() {
			return r.failRestore(ctx, rs, vmv1.ReasonVMRunning, runningMessage(vm))
		}
		if err := r.Client.Patch(ctx, next, client.MergeFromWithOptions(vm, client.MergeFromWithOptimisticLock{})); err != nil {
			return err // a conflict: the next reconcile reads the VM again
		}
	}
	return r.succeedRestore(ctx, rs)
}

// makeClone creates the new VM: the snapshot's VM's spec on the restored claims. Its UID is new,
// so its MAC address and cloud-init instance are too.
func (r RestoreReconciler) makeClone(ctx context.Context, rs *vmv1.VirtualMachineRestore, snap *vmv1.VirtualMachineSnapshot, made *vmv1.VirtualMachine) error {
	if made == nil {
		src := &vmv1.VirtualMachine{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: rs.Namespace, Name: snap.Spec.VMName}, src); apierrors.IsNotFound(err) {
			return r.failRestore(ctx, rs, vmv1.ReasonVMNotFound, fmt.Sprintf("VM %s, which snapshot %s was taken of, is gone: a clone copies its spec", snap.Spec.VMName, snap.Name))
		} else if err != nil {
			return err
		}
		vm := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: rs.Spec.VMName, Namespace: rs.Namespace,
			Labels: userLabels(src.Labels), Annotations: map[string]string{AnnotationRestoredFrom: string(rs.UID)}}}
		vm.Spec = *src.Spec.DeepCopy()
		to := map[string]string{}
		for _, c := range rs.Status.Claims {
			to[claimOfDisk(src, c.Disk)] = c.ClaimName
		}
		renameClaims(&vm.Spec.Guest, to)
		vm.Spec.RunRequestedAt, vm.Spec.Suspend, vm.Spec.Guest.StateClaim = nil, false, nil
		if err := r.Client.Create(ctx, vm); apierrors.IsAlreadyExists(err) {
			return nil // the cache will show it; ours or not is decided then
		} else if err != nil {
			return r.failRestore(ctx, rs, vmv1.ReasonVMExists, fmt.Sprintf("the API server refused VM %s: %v", rs.Spec.VMName, err))
		}
		r.Recorder.Eventf(rs, nil, corev1.EventTypeNormal, "Cloned", "Restore", "made VM %s from snapshot %s", rs.Spec.VMName, snap.Name)
	} else if made.Annotations[AnnotationRestoredFrom] != string(rs.UID) {
		return r.failRestore(ctx, rs, vmv1.ReasonVMExists, fmt.Sprintf("VM %s was made by someone else during the restore", made.Name))
	}
	return r.succeedRestore(ctx, rs)
}

// succeedRestore ends the restore and hands the claims over.
func (r RestoreReconciler) succeedRestore(ctx context.Context, rs *vmv1.VirtualMachineRestore) error {
	next := rs.DeepCopy()
	now := metav1.NewTime(r.Now())
	next.Status.Phase, next.Status.CompletionTime = vmv1.SnapshotSucceeded, &now
	msg := fmt.Sprintf("VM %s names the restored claims", rs.Spec.VMName)
	if rs.Status.Clone {
		msg = fmt.Sprintf("VM %s was made from snapshot %s on claims of its own", rs.Spec.VMName, rs.Spec.SnapshotName)
	}
	setReady(&next.Status.Conditions, rs.Generation, metav1.ConditionTrue, vmv1.ReasonReady, msg)
	if err := r.patchRestore(ctx, rs, next); err != nil {
		return err
	}
	r.Recorder.Eventf(rs, nil, corev1.EventTypeNormal, "Succeeded", "Restore", "%s", msg)
	r.Metrics.restoreEnded(rs)
	return r.tidyRestore(ctx, rs)
}

func (r RestoreReconciler) failRestore(ctx context.Context, rs *vmv1.VirtualMachineRestore, reason, message string) error {
	next := rs.DeepCopy()
	now := metav1.NewTime(r.Now())
	next.Status.Phase, next.Status.CompletionTime = vmv1.SnapshotFailed, &now
	setReady(&next.Status.Conditions, rs.Generation, metav1.ConditionFalse, reason, message)
	if err := r.patchRestore(ctx, rs, next); err != nil {
		return err
	}
	r.Recorder.Eventf(rs, nil, corev1.EventTypeWarning, reason, "Restore", "%s", message)
	r.Metrics.restoreEnded(rs)
	return r.tidyRestore(ctx, rs)
}

// tidyRestore deletes the copier; Succeeded: the restored claims become the VM's (no owner, as
// a VM's claims outlive it) and the replaced ones the restore's; Failed: the restored claims go.
func (r RestoreReconciler) tidyRestore(ctx context.Context, rs *vmv1.VirtualMachineRestore) error {
	if err := r.deletePod(ctx, rs.Namespace, rs.Status.CopierPod, rs.UID); err != nil {
		return err
	}
	for _, c := range rs.Status.Claims {
		if rs.Status.Phase != vmv1.SnapshotSucceeded {
			if err := r.deleteClaim(ctx, rs.Namespace, c.ClaimName, rs.UID); err != nil {
				return err
			}
			continue
		}
		if err := r.setOwner(ctx, rs, c.ClaimName, false); err != nil {
			return err
		}
		if c.Replaced != "" {
			if err := r.setOwner(ctx, rs, c.Replaced, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// setOwner adds (own) or removes rs as an owner of the named claim.
func (r RestoreReconciler) setOwner(ctx context.Context, rs *vmv1.VirtualMachineRestore, name string, own bool) error {
	c, err := r.claim(ctx, rs.Namespace, name)
	if err != nil || c == nil {
		return err
	}
	has := slices.ContainsFunc(c.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == rs.UID })
	if has == own {
		return nil
	}
	next := c.DeepCopy()
	if own {
		next.OwnerReferences = append(next.OwnerReferences, metav1.OwnerReference{APIVersion: vmv1.GroupVersion.String(), Kind: "VirtualMachineRestore", Name: rs.Name, UID: rs.UID})
	} else {
		next.OwnerReferences = slices.DeleteFunc(next.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == rs.UID })
	}
	return client.IgnoreNotFound(r.Client.Patch(ctx, next, client.MergeFrom(c)))
}

func (r RestoreReconciler) patchRestore(ctx context.Context, old, next *vmv1.VirtualMachineRestore) error {
	if err := statuspatch.Patch(ctx, r.Client, old, next); err != nil {
		return err
	}
	*old = *next
	return nil
}

func runningMessage(vm *vmv1.VirtualMachine) string {
	return fmt.Sprintf("VM %s is not stopped: a restore replaces the disks of a stopped VM only; stop it (vmctl stop %s, or runStrategy: Halted), wait for phase Stopped, and create the restore again", vm.Name, vm.Name)
}

// claimOfDisk is the claim the VM's disk (root or a data disk's name) is on; "" if none.
func claimOfDisk(vm *vmv1.VirtualMachine, disk string) string {
	for c := range vm.Spec.Guest.Claims() {
		if c.Name == disk && (c.Use == vmv1.ClaimRootDisk || c.Use == vmv1.ClaimDataDisk) {
			return c.ClaimName
		}
	}
	return ""
}

// renameClaims makes the guest's root and data disks name to[claim] in place of claim.
func renameClaims(g *vmv1.GuestSpec, to map[string]string) {
	if c := g.RootDisk.PersistentVolumeClaim; c != nil && to[c.ClaimName] != "" {
		c.ClaimName = to[c.ClaimName]
	}
	for i := range g.Disks {
		if c := g.Disks[i].PersistentVolumeClaim; c != nil && to[c.ClaimName] != "" {
			c.ClaimName = to[c.ClaimName]
		}
	}
}

// userLabels are the labels a clone takes from its source VM: the user's, not virtpod's.
func userLabels(l map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		if !strings.HasPrefix(k, vmv1.ReservedKeyPrefix) {
			out[k] = v
		}
	}
	return out
}
