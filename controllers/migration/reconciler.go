// Package migration is the VirtualMachineMigration controller: it moves a running guest to a
// target runner pod on another node, or on its own when spec.targetNode names it (the node agents
// carry the stream between the two runners), and switches the VM to it, or ends Failed with the cause and the guest still on one side; and,
// for VMs with evictionStrategy LiveMigrate, it keeps a PodDisruptionBudget and migrates them off
// cordoned nodes (evacuation.go).
package migration

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/statuspatch"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/migratable"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// Reconciler reconciles VirtualMachineMigrations.
type Reconciler struct {
	Client client.Client
	// APIReader confirms a pod is gone before the migration fails for it: the cache may not
	// have seen a pod just created.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Metrics   *Metrics
	Now       func() time.Time
}

// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachinemigrations,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachinemigrations/status,verbs=patch
// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachinemigrations/finalizers,verbs=update
// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachines,verbs=get;list;watch
// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachines/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// DefaultCompletionTimeout applies when a migration was stored without the CRD's default.
const DefaultCompletionTimeout = 300 * time.Second

// pods are the migration's two runner pods as they are now; nil when gone.
type pods struct{ source, target *corev1.Pod }

// Reconcile moves one migration along: start, follow the stream, switch or fail, clean up.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	mig := &vmv1.VirtualMachineMigration{}
	if err := r.Client.Get(ctx, req.NamespacedName, mig); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if mig.DeletionTimestamp == nil && !mig.Status.Terminal() && !controllerutil.ContainsFinalizer(mig, vmv1.MigrationFinalizer) {
		patched := mig.DeepCopy()
		controllerutil.AddFinalizer(patched, vmv1.MigrationFinalizer)
		return reconcile.Result{}, client.IgnoreNotFound(r.Client.Patch(ctx, patched, client.MergeFrom(mig))) // its event brings us back
	}
	p, err := r.pods(ctx, mig)
	if err != nil {
		return reconcile.Result{}, err
	}
	if mig.Status.Terminal() {
		if err := r.cleanUp(ctx, mig, p); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, r.release(ctx, mig)
	}
	vm := &vmv1.VirtualMachine{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: mig.Namespace, Name: mig.Spec.VMName}, vm); apierrors.IsNotFound(err) {
		vm = nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if mig.Status.Phase == "" || mig.Status.Phase == vmv1.MigrationPending {
		if mig.DeletionTimestamp != nil {
			return reconcile.Result{}, r.release(ctx, mig) // nothing started, nothing to undo
		}
		return r.start(ctx, mig, vm)
	}
	if !onTrack(mig, vm, p) {
		// What the cache shows would end the migration; it may be older than this
		// controller's own last write (the source's mark, made a reconcile ago) or than the
		// kubelet's and the scheduler's: the API server decides.
		if vm, p, err = r.fresh(ctx, mig); err != nil {
			return reconcile.Result{}, err
		}
	}
	return r.follow(ctx, mig, vm, p)
}

// start checks the VM can move, marks its runner pod as the source and creates the target.
func (r *Reconciler) start(ctx context.Context, mig *vmv1.VirtualMachineMigration, vm *vmv1.VirtualMachine) (reconcile.Result, error) {
	uid := string(mig.UID)
	var source *corev1.Pod
	var err error
	if vm != nil {
		if source, err = r.pod(ctx, mig.Namespace, vm.Status.PodName); err != nil {
			return reconcile.Result{}, err
		}
	}
	if reason, _ := notRunning(mig, vm, source); reason != "" {
		// The cache may not yet hold the VM, its pod or the guest's start: the API server
		// decides.
		if vm, source, err = r.freshSource(ctx, mig); err != nil {
			return reconcile.Result{}, err
		}
		if reason, why := notRunning(mig, vm, source); reason != "" {
			return r.fail(ctx, mig, mig.DeepCopy(), pods{}, reason, why)
		}
	}
	if other := source.Annotations[vmv1.AnnotationMigration]; other != "" && other != uid {
		if name, err := r.active(ctx, mig.Namespace, other); err != nil {
			return reconcile.Result{}, err
		} else if name != "" {
			return r.fail(ctx, mig, mig.DeepCopy(), pods{}, vmv1.ReasonAlreadyMigrating, fmt.Sprintf("VirtualMachine %s is being migrated by VirtualMachineMigration %s: wait for it to end, or delete it", vm.Name, name))
		}
	}
	if v := migratable.Check(vm, source); !v.OK() {
		return r.fail(ctx, mig, mig.DeepCopy(), pods{}, vmv1.ReasonNotMigratable, v.Reason+": "+v.Message)
	}
	claims, why := planClaims(mig, source)
	if why != "" {
		return r.fail(ctx, mig, mig.DeepCopy(), pods{}, vmv1.ReasonNotMigratable, why)
	}

	// Mark the source, guarded by its resourceVersion: of two migrations started at once, one
	// wins and the other finds the mark on its retry.
	marked := source.DeepCopy()
	if marked.Annotations == nil {
		marked.Annotations = map[string]string{}
	}
	marked.Annotations[vmv1.AnnotationMigration] = uid
	for _, k := range []string{vmv1.AnnotationMigrateTo, vmv1.AnnotationMigrationState, vmv1.AnnotationMigrationResume, vmv1.AnnotationMigrationBandwidth} {
		delete(marked.Annotations, k)
	}
	if err := r.Client.Patch(ctx, marked, client.MergeFromWithOptions(source, client.MergeFromWithOptimisticLock{})); err != nil {
		return reconcile.Result{}, err
	}
	next := mig.DeepCopy()
	next.Status.Phase = vmv1.MigrationScheduling
	next.Status.SourcePod, next.Status.SourceNode = source.Name, source.Spec.NodeName
	next.Status.TargetPod = podspec.TargetPodName(vm.Name, mig.UID)
	next.Status.StartTime = ptrTime(r.now())
	next.Status.Claims = claims
	setCompleted(&next.Status, mig.Generation, metav1.ConditionFalse, vmv1.ReasonInProgress, fmt.Sprintf("creating target pod %s for the guest on node %s", next.Status.TargetPod, source.Spec.NodeName))
	if err := r.writeStatus(ctx, mig, next); err != nil {
		return reconcile.Result{}, statuspatch.IgnoreStale(err)
	}
	if refused, err := r.makeTargetClaims(ctx, next); err != nil {
		return reconcile.Result{}, err
	} else if refused != "" {
		return r.fail(ctx, next, next.DeepCopy(), pods{source: marked}, vmv1.ReasonTargetFailed, refused)
	}
	runner := ""
	if vm.Status.Images != nil {
		runner = vm.Status.Images.Runner
	}
	target := podspec.TargetPod(marked, next, vm.Status.Machine, runner)
	if err := r.Client.Create(ctx, target); apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
		return r.fail(ctx, next, next.DeepCopy(), pods{source: marked}, vmv1.ReasonTargetFailed, "the API server refused target pod "+target.Name+": "+err.Error())
	} else if err != nil && !apierrors.IsAlreadyExists(err) {
		return reconcile.Result{}, err
	}
	r.Recorder.Eventf(next, target, corev1.EventTypeNormal, "Migrating", "CreateTarget", "Migrating VirtualMachine %s from node %s: created target pod %s", vm.Name, source.Spec.NodeName, target.Name)
	return reconcile.Result{RequeueAfter: r.untilDeadline(next)}, nil
}

// follow takes a started migration to its end. The order of the checks is what keeps exactly one
// guest: a guest running on the target wins over every failure; once the source has sent all
// (it is paused), nothing but the target's start or death decides.
func (r *Reconciler) follow(ctx context.Context, mig *vmv1.VirtualMachineMigration, vm *vmv1.VirtualMachine, p pods) (reconcile.Result, error) {
	uid := string(mig.UID)
	if !ours(p.source, uid) {
		p.source = nil // a pod under the source's name that is not ours (a restart's) is not the source
	}
	if !ours(p.target, uid) {
		p.target = nil
	}
	st := sourceState(p.source)
	next := mig.DeepCopy()
	progress(&next.Status, st)
	if p.target != nil {
		next.Status.TargetNode = p.target.Spec.NodeName
	}
	targetUp := alive(p.target)
	switch {
	case targetUp && started(p.target) && st.State != controlapi.MigrationCompleted && alive(p.source) && r.now().Before(r.deadline(mig)):
		// The guest runs on the target (QEMU starts it only once all of it arrived) before the
		// source's agent reported the send's end: its figures (bytes, downtime) come in its next
		// report, within a second; an agent that never reports holds the switch until the
		// deadline at most.
		return reconcile.Result{RequeueAfter: r.untilDeadline(mig)}, r.patchStatus(ctx, mig, next, "the guest runs on target pod "+next.Status.TargetPod+"; waiting for the source's final report")
	case targetUp && started(p.target):
		return r.switchOver(ctx, mig, next, vm, p)
	case st.State == controlapi.MigrationCompleted && !targetUp:
		return r.fail(ctx, mig, next, p, vmv1.ReasonTargetFailed, fmt.Sprintf("target pod %s %s after the guest's state was sent: the guest resumes on the source pod %s", next.Status.TargetPod, ended(p.target), next.Status.SourcePod))
	case st.State == controlapi.MigrationCompleted:
		// The source is paused and the target is loading the guest: it starts (the switch) or
		// dies (the source resumes). Cancelling now could leave two guests, or none.
		return reconcile.Result{}, r.patchStatus(ctx, mig, next, "the guest's state is sent; waiting for it to run on target pod "+next.Status.TargetPod)
	case mig.DeletionTimestamp != nil:
		return r.fail(ctx, mig, next, p, vmv1.ReasonCancelled, "the migration was deleted before it ended: the transfer is cancelled and the guest stays on the source")
	case vm == nil || vm.DeletionTimestamp != nil:
		return r.fail(ctx, mig, next, p, vmv1.ReasonVMDeleted, fmt.Sprintf("VirtualMachine %s was deleted during the migration", mig.Spec.VMName))
	case p.source == nil || !alive(p.source):
		// Read from the API server (Reconcile's onTrack), as is the VM: a deleted VM was told above.
		return r.fail(ctx, mig, next, p, vmv1.ReasonSourceFailed, fmt.Sprintf("source pod %s %s during the migration: the VM restarts as its runStrategy says", next.Status.SourcePod, ended(p.source)))
	case !targetUp:
		return r.fail(ctx, mig, next, p, vmv1.ReasonTargetFailed, fmt.Sprintf("target pod %s %s before the guest ran there: the guest stays on the source", next.Status.TargetPod, ended(p.target)))
	case st.State == controlapi.MigrationFailed || st.State == controlapi.MigrationCancelled:
		why := st.Error
		if why == "" {
			why = "the transfer was " + st.State
		}
		return r.fail(ctx, mig, next, p, vmv1.ReasonStreamBroken, "QEMU's transfer failed: "+why+"; the guest stays on the source")
	case !r.now().Before(r.deadline(mig)):
		return r.fail(ctx, mig, next, p, vmv1.ReasonTimeout, fmt.Sprintf("not done within spec.completionTimeoutSeconds (%s): the transfer is cancelled and the guest stays on the source; raise the timeout or bandwidthMiBps", r.timeout(mig)))
	}
	if why, ok := unschedulable(p.target, next.Status.Claims); ok {
		return r.fail(ctx, mig, next, p, vmv1.ReasonTargetUnschedulable, fmt.Sprintf("target pod %s cannot be scheduled: %s; the guest stays on the source", next.Status.TargetPod, why))
	}
	msg := fmt.Sprintf("target pod %s waits for a node", next.Status.TargetPod)
	if next.Status.TargetNode != "" {
		msg = fmt.Sprintf("target pod %s on node %s is starting its runner", next.Status.TargetPod, next.Status.TargetNode)
	}
	if receiver := p.target.Annotations[vmv1.AnnotationMigrationReceiver]; receiver != "" {
		if p.source.Annotations[vmv1.AnnotationMigrateTo] == "" {
			sending := p.source.DeepCopy()
			sending.Annotations[vmv1.AnnotationMigrateTo] = receiver + "/" + string(p.target.UID)
			// An earlier send's report is not this one's (a restarted agent reads it as such).
			delete(sending.Annotations, vmv1.AnnotationMigrationState)
			if bw := mig.Spec.BandwidthMiBps; bw > 0 {
				sending.Annotations[vmv1.AnnotationMigrationBandwidth] = strconv.FormatInt(bw, 10)
			}
			if err := r.Client.Patch(ctx, sending, client.MergeFrom(p.source)); err != nil {
				return reconcile.Result{}, err
			}
			r.Recorder.Eventf(mig, p.source, corev1.EventTypeNormal, "Sending", "StartTransfer", "Sending the guest from node %s to target pod %s on node %s", next.Status.SourceNode, p.target.Name, next.Status.TargetNode)
		}
		next.Status.Phase = vmv1.MigrationRunning
		msg = fmt.Sprintf("sending the guest to target pod %s on node %s", p.target.Name, next.Status.TargetNode)
		if st.TotalBytes > 0 {
			msg += fmt.Sprintf(": %d of %d bytes, %d remaining", st.TransferredBytes, st.TotalBytes, st.RemainingBytes)
		}
	}
	if err := r.patchStatus(ctx, mig, next, msg); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: r.untilDeadline(next)}, nil
}

// switchOver makes the target the VM's runner pod: the VM's status first, guarded by its
// resourceVersion (the VM controller then acts on the target), then the migration's, then the
// source is deleted (cleanUp).
func (r *Reconciler) switchOver(ctx context.Context, was, next *vmv1.VirtualMachineMigration, vm *vmv1.VirtualMachine, p pods) (reconcile.Result, error) {
	t := p.target
	if vm != nil && vm.DeletionTimestamp == nil && vm.Status.PodUID != string(t.UID) {
		if vm.Status.PodName != next.Status.SourcePod && vm.Status.PodName != t.Name {
			// The VM moved on to another pod (a restart): that pod's guest is the VM's; this
			// one must not be a second.
			return r.fail(ctx, was, next, p, vmv1.ReasonSourceFailed, fmt.Sprintf("VirtualMachine %s runs pod %s now, not source pod %s", vm.Name, vm.Status.PodName, next.Status.SourcePod))
		}
		vm, err := r.repointVM(ctx, vm, next.Status.Claims)
		if err != nil {
			return reconcile.Result{}, err // a conflict retries from the VM as it is now
		}
		switched := vm.DeepCopy()
		switched.Status.PodName, switched.Status.PodUID = t.Name, string(t.UID)
		switched.Status.Node, switched.Status.PodIP = t.Spec.NodeName, t.Status.PodIP
		if err := statuspatch.Patch(ctx, r.Client, vm, switched); err != nil {
			return reconcile.Result{}, err // a conflict retries from the VM as it is now
		}
	}
	next.Status.Phase = vmv1.MigrationSucceeded
	next.Status.CompletionTime = ptrTime(r.now())
	setCompleted(&next.Status, next.Generation, metav1.ConditionTrue, vmv1.ReasonSucceeded,
		fmt.Sprintf("the guest runs in pod %s on node %s; source pod %s on node %s is deleted", t.Name, t.Spec.NodeName, next.Status.SourcePod, next.Status.SourceNode))
	return r.end(ctx, was, next, p)
}

// fail ends the migration with reason and message; cleanUp then removes the target and unmarks
// the source (a source that sent everything to a target now dead is told to resume).
// was is the migration as the server holds it, next what this reconcile makes of it.
func (r *Reconciler) fail(ctx context.Context, was, next *vmv1.VirtualMachineMigration, p pods, reason, message string) (reconcile.Result, error) {
	next.Status.Phase = vmv1.MigrationFailed
	next.Status.CompletionTime = ptrTime(r.now())
	setCompleted(&next.Status, next.Generation, metav1.ConditionFalse, reason, message)
	return r.end(ctx, was, next, p)
}

// end writes a terminal status, then tells and counts it once (the guarded write made the
// transition), and cleans up.
func (r *Reconciler) end(ctx context.Context, was, next *vmv1.VirtualMachineMigration, p pods) (reconcile.Result, error) {
	if err := r.writeStatus(ctx, was, next); err != nil {
		return reconcile.Result{}, statuspatch.IgnoreStale(err) // a newer migration's event brings us back
	}
	c := meta.FindStatusCondition(next.Status.Conditions, vmv1.ConditionCompleted)
	if next.Status.Phase == vmv1.MigrationSucceeded {
		r.Recorder.Eventf(next, p.target, corev1.EventTypeNormal, vmv1.ReasonSucceeded, "Migrate", "%s", c.Message)
	} else {
		r.Recorder.Eventf(next, nil, corev1.EventTypeWarning, c.Reason, "Migrate", "%s", c.Message)
	}
	r.Metrics.ended(next)
	if err := r.cleanUp(ctx, next, p); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.release(ctx, next)
}

// cleanUp leaves one runner pod for the guest: after a success the source is deleted and the
// target unmarked; after a failure the target is deleted and the source unmarked (and, if it
// had sent everything, resumed). Repeatable: a terminal migration's reconcile runs it again.
func (r *Reconciler) cleanUp(ctx context.Context, mig *vmv1.VirtualMachineMigration, p pods) error {
	uid := string(mig.UID)
	if err := r.settleClaims(ctx, mig); err != nil {
		return err
	}
	keep, drop := p.source, p.target
	if mig.Status.Phase == vmv1.MigrationSucceeded {
		keep, drop = p.target, p.source
	}
	if ours(drop, uid) && drop.DeletionTimestamp == nil {
		if err := r.Client.Delete(ctx, drop, client.Preconditions{UID: &drop.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return err
		}
	}
	if !ours(keep, uid) {
		return nil
	}
	unmarked := keep.DeepCopy()
	resume := keep.Annotations[vmv1.AnnotationMigrateTo] != "" && sourceState(keep).State == controlapi.MigrationCompleted && mig.Status.Phase == vmv1.MigrationFailed
	for _, k := range []string{vmv1.AnnotationMigration, vmv1.AnnotationMigrateTo, vmv1.AnnotationMigrationState, vmv1.AnnotationMigrationReceiver, vmv1.AnnotationMigrationBandwidth} {
		delete(unmarked.Annotations, k)
	}
	delete(unmarked.Labels, vmv1.LabelMigrationRole)
	if resume {
		unmarked.Annotations[vmv1.AnnotationMigrationResume] = "true"
	}
	return client.IgnoreNotFound(r.Client.Patch(ctx, unmarked, client.MergeFrom(keep)))
}

// release drops the finalizer of a migration that has ended and been cleaned up, or was deleted
// before it started: an ended migration is a record that holds nothing, so deleting it (or its
// namespace, or virtpod's CRDs at an uninstall) never waits for the controller.
func (r *Reconciler) release(ctx context.Context, mig *vmv1.VirtualMachineMigration) error {
	if !controllerutil.ContainsFinalizer(mig, vmv1.MigrationFinalizer) {
		return nil
	}
	patched := mig.DeepCopy()
	controllerutil.RemoveFinalizer(patched, vmv1.MigrationFinalizer)
	return client.IgnoreNotFound(r.Client.Patch(ctx, patched, client.MergeFrom(mig)))
}

// patchStatus writes an in-progress status with msg as the Completed condition's message.
func (r *Reconciler) patchStatus(ctx context.Context, mig, next *vmv1.VirtualMachineMigration, msg string) error {
	setCompleted(&next.Status, mig.Generation, metav1.ConditionFalse, vmv1.ReasonInProgress, msg)
	return statuspatch.IgnoreStale(r.writeStatus(ctx, mig, next))
}

// writeStatus writes next's status over was's, guarded by was's resourceVersion, unless its phase
// moves other than Transitions allow.
func (r *Reconciler) writeStatus(ctx context.Context, was, next *vmv1.VirtualMachineMigration) error {
	if err := checkTransition(was, next); err != nil {
		return err
	}
	return statuspatch.Patch(ctx, r.Client, was, next)
}

// fresh reads the migration's VM and both pods from the API server, not the cache.
func (r *Reconciler) fresh(ctx context.Context, mig *vmv1.VirtualMachineMigration) (*vmv1.VirtualMachine, pods, error) {
	var p pods
	vm, err := r.liveVM(ctx, mig)
	if err != nil {
		return nil, p, err
	}
	if p.source, err = r.livePod(ctx, mig.Namespace, mig.Status.SourcePod); err != nil {
		return nil, p, err
	}
	p.target, err = r.livePod(ctx, mig.Namespace, mig.Status.TargetPod)
	return vm, p, err
}

// freshSource reads the VM and the pod its status names from the API server.
func (r *Reconciler) freshSource(ctx context.Context, mig *vmv1.VirtualMachineMigration) (*vmv1.VirtualMachine, *corev1.Pod, error) {
	vm, err := r.liveVM(ctx, mig)
	if err != nil || vm == nil {
		return vm, nil, err
	}
	source, err := r.livePod(ctx, mig.Namespace, vm.Status.PodName)
	return vm, source, err
}

func (r *Reconciler) liveVM(ctx context.Context, mig *vmv1.VirtualMachineMigration) (*vmv1.VirtualMachine, error) {
	vm := &vmv1.VirtualMachine{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: mig.Namespace, Name: mig.Spec.VMName}, vm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return vm, err
}

func (r *Reconciler) livePod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	if name == "" {
		return nil, nil
	}
	pod := &corev1.Pod{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, pod)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pod, err
}

func (r *Reconciler) pods(ctx context.Context, mig *vmv1.VirtualMachineMigration) (pods, error) {
	var p pods
	var err error
	if p.source, err = r.pod(ctx, mig.Namespace, mig.Status.SourcePod); err != nil {
		return p, err
	}
	p.target, err = r.pod(ctx, mig.Namespace, mig.Status.TargetPod)
	return p, err
}

// pod reads a pod from the cache, and a pod the cache lacks from the server: one just created
// may not be in the cache yet, and its absence would fail the migration.
func (r *Reconciler) pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	if name == "" {
		return nil, nil
	}
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, pod); apierrors.IsNotFound(err) {
		return r.livePod(ctx, namespace, name)
	} else if err != nil {
		return nil, err
	}
	return pod, nil
}

// active names the migration of UID uid in namespace if it has not ended; "" otherwise.
func (r *Reconciler) active(ctx context.Context, namespace, uid string) (string, error) {
	list := &vmv1.VirtualMachineMigrationList{}
	if err := r.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return "", err
	}
	for _, m := range list.Items {
		if string(m.UID) == uid && !m.Status.Terminal() {
			return m.Name, nil
		}
	}
	return "", nil
}

func progress(st *vmv1.VirtualMachineMigrationStatus, s controlapi.MigrationStatus) {
	if s.State == "" {
		return
	}
	st.TransferredBytes, st.TotalBytes = max(st.TransferredBytes, s.TransferredBytes), max(st.TotalBytes, s.TotalBytes)
	if s.DowntimeMs > 0 {
		st.DowntimeMs = s.DowntimeMs
	}
	if s.Role == controlapi.RoleSource && len(s.Disks) > 0 {
		st.CopiedDisks, st.DiskBytes = s.Disks, max(st.DiskBytes, s.DiskBytes)
	}
}

func setCompleted(st *vmv1.VirtualMachineMigrationStatus, generation int64, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: vmv1.ConditionCompleted, Status: status, ObservedGeneration: generation, Reason: reason, Message: message})
}

func (r *Reconciler) timeout(mig *vmv1.VirtualMachineMigration) time.Duration {
	if s := mig.Spec.CompletionTimeoutSeconds; s > 0 {
		return time.Duration(s) * time.Second
	}
	return DefaultCompletionTimeout
}

func (r *Reconciler) deadline(mig *vmv1.VirtualMachineMigration) time.Time {
	start := mig.CreationTimestamp.Time
	if mig.Status.StartTime != nil {
		start = mig.Status.StartTime.Time
	}
	return start.Add(r.timeout(mig))
}

// untilDeadline is the one wake-up a migration schedules: its deadline. Every other step
// follows a pod's or the VM's event.
func (r *Reconciler) untilDeadline(mig *vmv1.VirtualMachineMigration) time.Duration {
	return max(r.deadline(mig).Sub(r.now()), time.Second)
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func ptrTime(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }
