package snapshot

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// source is the runner pod whose running guest the snapshot copies, nil for a stopped VM, or
// why the snapshot must wait (busy): the VM is starting, stopping, migrating or suspended, or
// another snapshot of it is under way.
func (r *Reconciler) source(ctx context.Context, snap *vmv1.VirtualMachineSnapshot, vm *vmv1.VirtualMachine) (pod *corev1.Pod, busy string, err error) {
	list := &vmv1.VirtualMachineSnapshotList{}
	if err := r.Client.List(ctx, list, client.InNamespace(snap.Namespace)); err != nil {
		return nil, "", err
	}
	for _, o := range list.Items {
		if o.UID != snap.UID && o.Spec.VMName == vm.Name && o.Status.Phase == vmv1.SnapshotInProgress {
			return nil, fmt.Sprintf("snapshot %s of VM %s is under way; this one starts when it ends", o.Name, vm.Name), nil
		}
	}
	if vm.Spec.Suspend || vm.Status.SuspendedState != nil {
		return nil, fmt.Sprintf("VM %s is suspended: its guest's memory is saved apart from its disks; resume it (vmctl resume %s) and the snapshot starts", vm.Name, vm.Name), nil
	}
	if vm.Status.PodUID == "" {
		if vm.Stopped() {
			return nil, "", nil
		}
		return nil, fmt.Sprintf("VM %s is %s: the snapshot starts once its guest runs or it is stopped", vm.Name, phaseOf(vm)), nil
	}
	if pod, err = r.pod(ctx, vm.Namespace, vm.Status.PodName); err != nil {
		return nil, "", err
	}
	if pod != nil && string(pod.UID) != vm.Status.PodUID {
		pod = nil // the cache is behind the VM's status
	}
	switch {
	case pod == nil || vm.Status.Phase != vmv1.PhaseRunning || pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil:
		return nil, fmt.Sprintf("VM %s is %s: the snapshot starts once its guest runs or it is stopped", vm.Name, phaseOf(vm)), nil
	case pod.Annotations[vmv1.AnnotationMigration] != "":
		return nil, fmt.Sprintf("VM %s is migrating; the snapshot starts once the guest runs in one pod", vm.Name), nil
	case vm.Spec.Provider != "" && vm.Spec.Provider != vmv1.ProviderQEMU:
		return nil, fmt.Sprintf("VM %s runs on %s, which cannot copy a running guest's disks: stop it (runStrategy: Halted) and the snapshot copies them", vm.Name, vm.Spec.Provider), nil
	}
	return pod, "", nil
}

func phaseOf(vm *vmv1.VirtualMachine) string {
	if vm.Status.Phase == "" {
		return "not started yet"
	}
	return strings.ToLower(string(vm.Status.Phase))
}

// planDisks are the VM's writable disks on claims, each with the snapshot's claim for it;
// refused says why the VM's disks cannot be copied (a claim gone, a Block claim, none at all).
func (r *Reconciler) planDisks(ctx context.Context, snap *vmv1.VirtualMachineSnapshot, vm *vmv1.VirtualMachine) (disks []vmv1.SnapshotDisk, refused string, err error) {
	for c := range vm.Spec.Guest.Claims() {
		if c.ReadOnly || c.Use != vmv1.ClaimRootDisk && c.Use != vmv1.ClaimDataDisk {
			continue
		}
		pvc, err := r.claim(ctx, vm.Namespace, c.ClaimName)
		if err != nil {
			return nil, "", err
		}
		if pvc == nil {
			return disks, fmt.Sprintf("claim %s of disk %s does not exist: nothing to copy", c.ClaimName, c.Name), nil
		}
		if pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock {
			return disks, fmt.Sprintf("disk %s is on claim %s of volumeMode Block: snapshots copy Filesystem claims only", c.Name, c.ClaimName), nil
		}
		size := podspec.ClaimSize(pvc)
		disks = append(disks, vmv1.SnapshotDisk{Disk: c.Name, SourceClaim: c.ClaimName,
			ClaimName: podspec.SnapshotClaimName(snap.Name, c.Name), SizeBytes: size.Value()})
	}
	if len(disks) == 0 {
		return nil, fmt.Sprintf("VM %s has no writable disk on a claim (root disk or data disk): a root disk from an image alone, empty disks and read-only disks live with the pod or their source and are not copied", vm.Name), nil
	}
	return disks, "", nil
}

// refusedReason is the reason of planDisks' refusal: no disk at all, or a claim unfit.
func refusedReason(disks []vmv1.SnapshotDisk) string {
	if len(disks) == 0 {
		return vmv1.ReasonNothingToCopy
	}
	return vmv1.ReasonClaimRefused
}

// base is the snapshot this one builds on: the VM's last one, taken from the same run (its
// bitmap lives in that QEMU), Succeeded and of the same disks; "" for a full copy.
func (r *Reconciler) base(ctx context.Context, snap *vmv1.VirtualMachineSnapshot, vm *vmv1.VirtualMachine, source *corev1.Pod, disks []vmv1.SnapshotDisk) string {
	last := vm.Status.LastSnapshot
	if snap.Spec.Full || last == nil || last.PodUID != string(source.UID) || last.Name == snap.Name {
		return ""
	}
	b := &vmv1.VirtualMachineSnapshot{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: snap.Namespace, Name: last.Name}, b); err != nil {
		return "" // gone: copy whole
	}
	if b.Status.Phase != vmv1.SnapshotSucceeded || b.Status.Bitmap != last.Bitmap || b.DeletionTimestamp != nil ||
		!slices.EqualFunc(b.Status.Disks, disks, func(x, y vmv1.SnapshotDisk) bool { return x.Disk == y.Disk && x.SourceClaim == y.SourceClaim }) {
		return ""
	}
	return b.Name
}

func progressMessage(snap *vmv1.VirtualMachineSnapshot) string {
	var names []string
	for _, d := range snap.Status.Disks {
		names = append(names, d.Disk)
	}
	how := "copying the stopped VM's disks"
	if snap.Status.SourcePod != "" {
		how = "copying the running guest's disks at one instant"
		if snap.Status.Base != "" {
			how += ", only the blocks written since snapshot " + snap.Status.Base
		}
	}
	return fmt.Sprintf("%s (%s) of VM %s", how, strings.Join(names, ", "), snap.Spec.VMName)
}

func readyMessage(snap *vmv1.VirtualMachineSnapshot, st *controlapi.BackupStatus) string {
	var copied, size int64
	for _, d := range snap.Status.Disks {
		copied += d.CopiedBytes
		size += d.SizeBytes
	}
	msg := fmt.Sprintf("%d disk(s) of VM %s copied (%s)", len(snap.Status.Disks), snap.Spec.VMName, snap.Status.Consistency)
	if snap.Status.SourcePod != "" {
		msg += fmt.Sprintf(", %d of %d bytes read from the guest's disks", copied, size)
	}
	if snap.Status.Base != "" {
		msg += ", built on snapshot " + snap.Status.Base
	}
	if st != nil && st.FreezeError != "" {
		msg += "; not frozen: " + st.FreezeError
	}
	return msg
}

// claim reads a claim from the cache, and one the cache lacks from the server.
func (r *Reconciler) claim(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	c := &corev1.PersistentVolumeClaim{}
	if err := r.get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, c); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return c, nil
}

// pod reads a pod from the cache, and one the cache lacks from the server; nil when gone.
func (r *Reconciler) pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	if name == "" {
		return nil, nil
	}
	p := &corev1.Pod{}
	if err := r.get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, p); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return p, nil
}

func (r *Reconciler) get(ctx context.Context, key types.NamespacedName, o client.Object) error {
	err := r.Client.Get(ctx, key, o)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, o)
	}
	return err
}
