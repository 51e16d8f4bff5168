// Package snapshot is the controller of VirtualMachineSnapshots and VirtualMachineRestores
// (docs/snapshots.md). A snapshot copies a VM's writable disks on claims into claims of its own,
// through a copier pod: from a running guest, its QEMU pushes a point-in-time copy of every disk
// at one instant (the node agent relays it into the copier, which serves the new claims over
// NBD), and only the blocks written since the VM's last snapshot when that one was taken from
// the same run; from a stopped VM, the copier copies the claims' files. A restore copies a
// snapshot's claims into new ones and points the stopped VM at them, or makes a new VM on them
// (a clone). Each ends Succeeded or Failed, and a failure leaves nothing it made behind.
package snapshot

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/statuspatch"
	"github.com/virtpod/virtpod/pkg/controlapi"
)

// Reconciler reconciles VirtualMachineSnapshots.
type Reconciler struct {
	Client client.Client
	// APIReader reads what the cache may not hold yet (a copier pod just made).
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Now is the clock (time.Now when nil at setup).
	Now func() time.Time
	// RunnerImage is the copier's image for a VM whose status names none.
	RunnerImage string
	Metrics     *Metrics
}

// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachinesnapshots;virtualmachinerestores,verbs=get;list;watch
// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachinesnapshots/status;virtualmachinerestores/status,verbs=patch
// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachinesnapshots/finalizers;virtualmachinerestores/finalizers,verbs=update
// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachines,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachines/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile moves one snapshot along: start, copy, then succeed or fail, and tidy up.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	snap := &vmv1.VirtualMachineSnapshot{}
	if err := r.Client.Get(ctx, req.NamespacedName, snap); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if snap.Status.Terminal() {
		return reconcile.Result{}, r.tidy(ctx, snap)
	}
	if left := r.left(snap.Status.StartTime, snap.Spec.DeadlineSeconds); left <= 0 {
		return reconcile.Result{}, r.fail(ctx, snap, vmv1.ReasonTimeout, fmt.Sprintf("not done within spec.deadlineSeconds (%d s): the copy is stopped and what it made deleted; give a longer deadline for large disks", deadline(snap.Spec.DeadlineSeconds)/time.Second))
	}
	vm := &vmv1.VirtualMachine{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: snap.Namespace, Name: snap.Spec.VMName}, vm); apierrors.IsNotFound(err) {
		vm = nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	var err error
	if snap.Status.Phase == "" || snap.Status.Phase == vmv1.SnapshotPending {
		if err = r.start(ctx, snap, vm); err != nil || snap.Status.Phase != vmv1.SnapshotInProgress {
			return reconcile.Result{}, err
		}
	}
	if err = r.follow(ctx, snap); err != nil || snap.Status.Terminal() {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: r.left(snap.Status.StartTime, snap.Spec.DeadlineSeconds)}, nil
}

// start plans the copy: which disks, from a running guest or a stopped VM, onto which claims,
// built on which earlier snapshot. The plan is written before anything is made, so a controller
// restarted mid-way carries on with the same one.
func (r *Reconciler) start(ctx context.Context, snap *vmv1.VirtualMachineSnapshot, vm *vmv1.VirtualMachine) error {
	if vm == nil {
		return r.fail(ctx, snap, vmv1.ReasonVMNotFound, fmt.Sprintf("VirtualMachine %s does not exist in namespace %s", snap.Spec.VMName, snap.Namespace))
	}
	source, busy, err := r.source(ctx, snap, vm)
	if err != nil {
		return err
	}
	if busy != "" {
		next := snap.DeepCopy()
		next.Status.Phase = vmv1.SnapshotPending
		setReady(&next.Status.Conditions, snap.Generation, metav1.ConditionFalse, vmv1.ReasonVMBusy, busy)
		return r.patch(ctx, snap, next)
	}
	disks, refused, err := r.planDisks(ctx, snap, vm)
	if err != nil {
		return err
	}
	if refused != "" {
		return r.fail(ctx, snap, refusedReason(disks), refused)
	}
	next := snap.DeepCopy()
	now := metav1.NewTime(r.Now())
	next.Status.Phase = vmv1.SnapshotInProgress
	next.Status.StartTime = &now
	next.Status.Disks = disks
	next.Status.CopierPod = snap.Name + "-snapshot"
	if source != nil {
		next.Status.SourcePod, next.Status.SourcePodUID, next.Status.SourceNode = source.Name, string(source.UID), source.Spec.NodeName
		next.Status.Bitmap = "s-" + string(snap.UID)
		next.Status.Base = r.base(ctx, snap, vm, source, disks)
	} else {
		next.Status.Consistency = vmv1.ConsistencyOffline
	}
	setReady(&next.Status.Conditions, snap.Generation, metav1.ConditionFalse, vmv1.ReasonInProgress, progressMessage(next))
	if err := r.patch(ctx, snap, next); err != nil {
		return err
	}
	r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Snapshotting", "Snapshot", "%s", progressMessage(snap))
	return nil
}

// follow makes the claims and the copier, asks the source's agent to push (a running guest),
// and ends the snapshot once both sides are done, or as soon as either failed.
func (r *Reconciler) follow(ctx context.Context, snap *vmv1.VirtualMachineSnapshot) error {
	if refused, err := r.makeClaims(ctx, snap); err != nil {
		return err
	} else if refused != "" {
		return r.fail(ctx, snap, vmv1.ReasonClaimRefused, refused)
	}
	copier, err := r.ensureCopier(ctx, snap)
	if err != nil {
		return err
	}
	if copier.Status.Phase == corev1.PodFailed {
		return r.fail(ctx, snap, vmv1.ReasonCopyFailed, "copier pod "+copier.Name+" failed: "+terminationMessage(copier))
	}
	if snap.Status.SourcePod == "" {
		if copier.Status.Phase == corev1.PodSucceeded {
			return r.succeed(ctx, snap, nil)
		}
		return nil
	}
	source, err := r.pod(ctx, snap.Namespace, snap.Status.SourcePod)
	if err != nil {
		return err
	}
	if source == nil || string(source.UID) != snap.Status.SourcePodUID || source.DeletionTimestamp != nil || podEnded(source) {
		return r.fail(ctx, snap, vmv1.ReasonSourceGone, fmt.Sprintf("runner pod %s of VM %s ended during the copy: take the snapshot again once the VM runs (or is stopped)", snap.Status.SourcePod, snap.Spec.VMName))
	}
	result, ok := resultFor(source, snap.Name)
	switch {
	case ok && result.Status.Error != "":
		return r.fail(ctx, snap, vmv1.ReasonCopyFailed, "the guest's QEMU could not copy its disks: "+result.Status.Error)
	case ok && copier.Status.Phase == corev1.PodSucceeded:
		return r.succeed(ctx, snap, &result.Status)
	case ok:
		return nil // the copier flushes and ends; its end brings us back
	case copier.Status.Phase == corev1.PodRunning && source.Annotations[vmv1.AnnotationSnapshot] != snap.Name:
		return r.markSource(ctx, source, snap.Name)
	}
	return nil
}

// succeed records the copy (st: the runner's figures, for a running guest) and the VM's last
// snapshot, then tidies up.
func (r *Reconciler) succeed(ctx context.Context, snap *vmv1.VirtualMachineSnapshot, st *controlapi.BackupStatus) error {
	next := snap.DeepCopy()
	if st != nil {
		next.Status.Consistency = vmv1.Consistency(st.Consistency)
		for i := range next.Status.Disks {
			for _, d := range st.Drives {
				if d.Drive == controlapi.DriveOf(next.Status.Disks[i].Disk) {
					next.Status.Disks[i].CopiedBytes = d.Copied
				}
			}
		}
	}
	// The VM first: a controller killed between the two writes finds the snapshot still in
	// progress and writes both again; the other way round, the VM would never name it.
	if st != nil {
		if err := r.recordOnVM(ctx, snap); err != nil {
			return err
		}
	}
	now := metav1.NewTime(r.Now())
	next.Status.Phase, next.Status.CompletionTime = vmv1.SnapshotSucceeded, &now
	setReady(&next.Status.Conditions, snap.Generation, metav1.ConditionTrue, vmv1.ReasonReady, readyMessage(next, st))
	if err := r.patch(ctx, snap, next); err != nil {
		return err
	}
	r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Succeeded", "Snapshot", "%s", readyMessage(snap, st))
	r.Metrics.snapshotEnded(snap)
	return r.tidy(ctx, snap)
}

// fail ends the snapshot with the cause, then deletes what it made.
func (r *Reconciler) fail(ctx context.Context, snap *vmv1.VirtualMachineSnapshot, reason, message string) error {
	next := snap.DeepCopy()
	now := metav1.NewTime(r.Now())
	next.Status.Phase, next.Status.CompletionTime = vmv1.SnapshotFailed, &now
	setReady(&next.Status.Conditions, snap.Generation, metav1.ConditionFalse, reason, message)
	if err := r.patch(ctx, snap, next); err != nil {
		return err
	}
	r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, reason, "Snapshot", "%s", message)
	r.Metrics.snapshotEnded(snap)
	return r.tidy(ctx, snap)
}

// tidy leaves an ended snapshot with its claims (Succeeded) or nothing (Failed): the copier pod
// and the source's marks go. Repeatable.
func (r *Reconciler) tidy(ctx context.Context, snap *vmv1.VirtualMachineSnapshot) error {
	if err := r.deletePod(ctx, snap.Namespace, snap.Status.CopierPod, snap.UID); err != nil {
		return err
	}
	if snap.Status.Phase == vmv1.SnapshotFailed {
		for _, d := range snap.Status.Disks {
			if err := r.deleteClaim(ctx, snap.Namespace, d.ClaimName, snap.UID); err != nil {
				return err
			}
		}
	}
	if snap.Status.SourcePod == "" {
		return nil
	}
	source, err := r.pod(ctx, snap.Namespace, snap.Status.SourcePod)
	if err != nil || source == nil || source.Annotations[vmv1.AnnotationSnapshot] != snap.Name {
		return err
	}
	return r.unmarkSource(ctx, source)
}

// recordOnVM names the snapshot in the VM's status (lastSnapshot): the next snapshot of the same
// run builds on it.
func (r *Reconciler) recordOnVM(ctx context.Context, snap *vmv1.VirtualMachineSnapshot) error {
	vm := &vmv1.VirtualMachine{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: snap.Namespace, Name: snap.Spec.VMName}, vm); err != nil {
		return client.IgnoreNotFound(err)
	}
	if vm.Status.PodUID != snap.Status.SourcePodUID {
		return nil // the run that holds the bitmap is over
	}
	if l := vm.Status.LastSnapshot; l != nil && l.Name == snap.Name && l.Bitmap == snap.Status.Bitmap {
		return nil // written already
	}
	next := vm.DeepCopy()
	next.Status.LastSnapshot = &vmv1.LastSnapshot{Name: snap.Name, Bitmap: snap.Status.Bitmap, PodUID: snap.Status.SourcePodUID}
	return client.IgnoreNotFound(r.Client.Status().Patch(ctx, next, client.MergeFromWithOptions(vm, client.MergeFromWithOptimisticLock{})))
}

// resultFor is the agent's result on source for the snapshot named, if it wrote one.
func resultFor(source *corev1.Pod, name string) (controlapi.SnapshotResult, bool) {
	var res controlapi.SnapshotResult
	raw := source.Annotations[vmv1.AnnotationSnapshotResult]
	if raw == "" || json.Unmarshal([]byte(raw), &res) != nil || res.Snapshot != name {
		return controlapi.SnapshotResult{}, false
	}
	return res, true
}

// markSource asks the source's node agent to push the guest's disks into the snapshot's copier.
func (r *Reconciler) markSource(ctx context.Context, source *corev1.Pod, name string) error {
	next := source.DeepCopy()
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[vmv1.AnnotationSnapshot] = name
	delete(next.Annotations, vmv1.AnnotationSnapshotResult)
	return client.IgnoreNotFound(r.Client.Patch(ctx, next, client.MergeFrom(source)))
}

// unmarkSource removes the snapshot's marks from the source pod.
func (r *Reconciler) unmarkSource(ctx context.Context, source *corev1.Pod) error {
	next := source.DeepCopy()
	delete(next.Annotations, vmv1.AnnotationSnapshot)
	delete(next.Annotations, vmv1.AnnotationSnapshotResult)
	return client.IgnoreNotFound(r.Client.Patch(ctx, next, client.MergeFrom(source)))
}

func (r *Reconciler) patch(ctx context.Context, old, next *vmv1.VirtualMachineSnapshot) error {
	if err := statuspatch.Patch(ctx, r.Client, old, next); err != nil {
		return err
	}
	*old = *next
	return nil
}

// left is how long a snapshot or restore that started at start has before its deadline.
func (r *Reconciler) left(start *metav1.Time, seconds int64) time.Duration {
	if start == nil {
		return deadline(seconds)
	}
	return start.Add(deadline(seconds)).Sub(r.Now())
}

// deadline is spec.deadlineSeconds, or the CRD's default for an object stored without it.
func deadline(seconds int64) time.Duration {
	if seconds <= 0 {
		seconds = 600
	}
	return time.Duration(seconds) * time.Second
}
