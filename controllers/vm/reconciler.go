// Package vm is the VirtualMachine controller: it turns each VirtualMachine into one runner pod,
// starts, stops and restarts the guest per the VM's run strategy and run requests, and reports
// what it sees in the VM's status.
package vm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/imagemapwatch"
	"github.com/virtpod/virtpod/controllers/statuspatch"
	"github.com/virtpod/virtpod/pkg/migratable"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// Reconciler reconciles VirtualMachines.
type Reconciler struct {
	Client client.Client
	// APIReader reads past the cache, which holds only virtpod's pods.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Options   podspec.Options
	// ImageMap is the controller-level image map; nil when --image-map is not set.
	ImageMap *imagemapwatch.Source
	Metrics  *Metrics
	// ConfigMaps reads ConfigMaps' metadata (whether a disk's ConfigMap exists); SetupWithManager
	// gives it a cache of its own when nil (disks.go).
	ConfigMaps client.Reader
	// Now is the clock; tests may replace it.
	Now func() time.Time
}

// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachines/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one VM's runner pod and status in line with its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vm := &vmv1.VirtualMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, vm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if vm.DeletionTimestamp != nil {
		return reconcile.Result{}, nil // the garbage collector deletes the pod; its grace period stops the guest
	}
	var (
		prov verdict
		err  error
	)
	if vm.Spec.Provider == "" {
		var patched bool
		if patched, prov, err = r.defaultProvider(ctx, vm); err != nil || patched {
			return reconcile.Result{}, err // the VM's update event brings us back
		}
	} else if prov, err = r.provider(ctx, vm); err != nil {
		return reconcile.Result{}, err
	}
	pod, err := r.runnerPod(ctx, vm)
	if err != nil {
		return reconcile.Result{}, err
	}
	opts, err := r.options(ctx)
	if err != nil {
		return reconcile.Result{}, r.fail("image-map", err)
	}
	opts.Class = prov.class
	images := podspec.Images(vm, opts)
	disks, err := r.checkDisks(ctx, vm, pod)
	if err != nil {
		return reconcile.Result{}, err
	}
	opts.Claims = disks.claims

	next := vm.DeepCopy()
	var result reconcile.Result
	var held *cause // why no runner pod is started, shown on Scheduled and Ready
	var moving bool // a migration target may hold the guest: no restart until it is switched to or gone
	if pod == nil || podEnded(pod) {
		if moving, err = r.migrationTarget(ctx, vm); err != nil {
			return reconcile.Result{}, err
		}
	}
	switch {
	case pod != nil && pod.DeletionTimestamp != nil:
		// Stopping: the pod's delete event brings us back.
		if vm.Spec.Halted() && runnerEnded(pod) {
			next.Status.LastTermination = termination(pod, r.now()) // how the guest took the power-down
		}
	case moving && (pod != nil || vm.Status.PodUID != ""):
		// The source of a migration ended or vanished: the migration controller switches the
		// VM to the target (whose guest runs) or deletes it, whose events bring us back.
	case pod != nil && podEnded(pod):
		if err := r.podEnded(ctx, vm, next, pod); err != nil {
			return reconcile.Result{}, err
		}
		if next.Status.PodUID == "" && pod.DeletionTimestamp == nil { // restarting: the pod is gone
			pod = nil
		}
	case pod == nil && vm.Status.PodUID != "":
		// The pod we ran is not in the cache: gone without ending (deleted, evicted, node
		// lost), or a cache that has not seen it yet. Only the server can tell.
		if gone, err := r.podGone(ctx, vm); err != nil || !gone {
			return reconcile.Result{}, err
		}
		if err := r.podVanished(ctx, vm, next); err != nil {
			return reconcile.Result{}, err
		}
	case pod == nil && vm.Spec.Halted():
		// Stopped: no pod until the strategy changes.
	case pod == nil && prov.blocked:
		held = &prov.why // no new start: ProviderAvailable says why
	case pod == nil && disks.held != nil:
		held = disks.held // no new start: DisksReady says why; a claim's or ConfigMap's event brings us back
	case pod == nil:
		if rerunRequested(vm) {
			if err := r.rerun(ctx, vm, next, nil); err != nil {
				return reconcile.Result{}, err
			}
		}
		var refused *podRefused
		if result, pod, err = r.startPod(ctx, vm, next, opts); errors.As(err, &refused) {
			held = refused.cause() // a change of the VM brings us back
		} else if err != nil {
			return reconcile.Result{}, err
		}
	default:
		if next.Status.PodUID != string(pod.UID) {
			adopt(next, pod) // ours, but the status write that named it was lost
		}
		if err := r.syncLabels(ctx, vm, pod); err != nil {
			return reconcile.Result{}, r.fail("sync-labels", err)
		}
		switch have := podspec.PodImages(pod); {
		case vm.Spec.Halted():
			err = r.stop(ctx, vm, next, pod)
		case migrating(pod):
			// A live migration moves this guest (controllers/migration): no restart or
			// replacement until it ends, which brings this pod's update event.
		case replaceRequested(vm, pod):
			err = r.rerun(ctx, vm, next, pod)
		case have != images && vm.Spec.ImageUpdatePolicy == vmv1.ImageUpdateRecreate:
			err = r.recreate(ctx, vm, next, pod, images)
		}
		if err != nil {
			return reconcile.Result{}, err
		}
	}

	// A running guest's live resize (resize.go): only the pod this status runs, kept running.
	// Not while the guest migrates: the target is a copy of this pod at its size now.
	var resized *resizePlan
	var movable *migratable.Verdict
	if running := pod != nil && pod.DeletionTimestamp == nil && !podEnded(pod) && !vm.Spec.Halted() && guestStarted(pod) && next.Status.PodUID == string(pod.UID); running && !migrating(pod) {
		p, err := r.resize(ctx, vm, pod, opts)
		if err != nil {
			return reconcile.Result{}, err
		}
		resized = &p
		v := migratable.Check(vm, pod)
		movable = &v
	} else if running {
		resized = &resizePlan{guest: guestSize(pod)} // as it was: the size is frozen while it moves
		if c := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionResized); c != nil {
			resized.show, resized.done, resized.condition = true, c.Status == metav1.ConditionTrue, cause{c.Reason, c.Message}
		}
		v := migratable.Check(vm, pod)
		movable = &v
	}

	// What the conditions are decided from, read before any is set.
	f := facts{pod: pod, held: held, halted: haltedCause(vm), stopping: stoppingCause(next, pod)}
	if f.lost, err = r.nodeHealth(ctx, vm, pod); err != nil {
		return reconcile.Result{}, err
	}
	if f.fit, err = r.whyNot(ctx, vm, pod, prov.class); err != nil {
		return reconcile.Result{}, err
	}
	observe(&next.Status, vm.Generation, pod, vm.Spec.Halted())
	setScheduled(&next.Status, vm.Generation, f)
	setReady(&next.Status, vm.Generation, f)
	setImagesCurrent(&next.Status, vm.Generation, pod, images, false)
	setProviderAvailable(&next.Status, vm.Generation, prov)
	setSoftwareEmulation(&next.Status, vm)
	setDisksReady(&next.Status, vm.Generation, disks)
	setResized(&next.Status, vm.Generation, resized)
	setMigratable(&next.Status, vm.Generation, movable)
	if err := r.patchStatus(ctx, vm, next); apierrors.IsConflict(err) {
		return reconcile.Result{}, nil // we read a stale VM; the newer one's event brings us back
	} else if err != nil {
		return reconcile.Result{}, r.fail("patch-status", err)
	}
	r.announceEnd(vm, next, pod)
	r.announcePower(vm, next, pod)
	r.announceResize(vm, next, pod)
	r.Metrics.observe(vm, next, r.now())
	return result, nil
}

func (r *Reconciler) runnerPod(ctx context.Context, vm *vmv1.VirtualMachine) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: runnerPodName(vm)}, pod)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, r.fail("get-pod", err)
	}
	if !ownedBy(pod, vm) {
		if vm.Spec.Halted() {
			return nil, nil // a halted VM needs no pod, so no name either
		}
		return nil, r.checkOwner(ctx, vm, pod)
	}
	return pod, nil
}

var errNameTaken = errors.New("runner pod name taken")

func (r *Reconciler) checkOwner(ctx context.Context, vm *vmv1.VirtualMachine, pod *corev1.Pod) error {
	live := &corev1.Pod{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), live); err != nil {
		return r.fail("get-pod", client.IgnoreNotFound(err))
	}
	if ownedBy(live, vm) {
		return nil
	}
	return r.nameTaken(ctx, vm, fmt.Errorf("%w: pod %s exists and does not belong to this VirtualMachine; delete or rename that pod", errNameTaken, pod.Name))
}

// nameTaken reports a pod of someone else's under the runner's name; the error makes the queue
// retry with back-off until it is gone, since that pod's events do not reach this controller.
func (r *Reconciler) nameTaken(ctx context.Context, vm *vmv1.VirtualMachine, taken error) error {
	next := vm.DeepCopy()
	next.Status.Phase, next.Status.ObservedGeneration = vmv1.PhasePending, vm.Generation
	f := facts{held: &cause{vmv1.ReasonPodNameTaken, taken.Error()}}
	setScheduled(&next.Status, vm.Generation, f)
	setReady(&next.Status, vm.Generation, f)
	if !equality.Semantic.DeepEqual(vm.Status, next.Status) {
		r.Recorder.Eventf(vm, nil, corev1.EventTypeWarning, vmv1.ReasonPodNameTaken, "CreatePod", "%v", taken)
	}
	if err := r.patchStatus(ctx, vm, next); err != nil {
		return r.fail("patch-status", err)
	}
	return r.fail("pod-name-taken", taken)
}

// startPod creates the runner pod, after the restart back-off when the guest is restarting.
func (r *Reconciler) startPod(ctx context.Context, vm, next *vmv1.VirtualMachine, opts podspec.Options) (reconcile.Result, *corev1.Pod, error) {
	if stopped(vm) || vm.Spec.Halted() {
		return reconcile.Result{}, nil, nil
	}
	if wait := restartWait(vm, r.now()); wait > 0 {
		next.Status.Phase = vmv1.PhasePending
		return reconcile.Result{RequeueAfter: wait}, nil, nil
	}
	pod := podspec.Build(vm, opts)
	// The run this pod is for, so that its end is counted even if the status write that names
	// the pod is lost (a controller killed in between).
	metav1.SetMetaDataAnnotation(&pod.ObjectMeta, AnnotationRestartCount, strconv.Itoa(int(vm.Status.RestartCount)))
	req := satisfiedRequest(vm)
	if req != nil {
		metav1.SetMetaDataAnnotation(&pod.ObjectMeta, AnnotationRunRequest, req.UTC().Format(time.RFC3339))
	}
	if err := r.Client.Create(ctx, pod); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// The cache holds only virtpod's pods: read the server to tell a stale cache (the
			// pod's watch event brings us back) from someone else's pod under our name.
			if err := r.checkOwner(ctx, vm, pod); err != nil {
				return reconcile.Result{}, nil, err
			}
			return reconcile.Result{}, nil, nil
		}
		r.Recorder.Eventf(vm, nil, corev1.EventTypeWarning, "CreatePodFailed", "CreatePod", "Could not create runner pod %s: %v", pod.Name, err)
		if apierrors.IsInvalid(err) {
			return reconcile.Result{}, nil, &podRefused{err: err} // retrying the same pod cannot help
		}
		if level, ok := podSecurityLevel(err); ok {
			// A relabelled namespace brings us back (the namespace watch in setup.go).
			return reconcile.Result{}, nil, &podRefused{err: err, podSecurity: level}
		}
		return reconcile.Result{}, nil, r.fail("create-pod", err)
	}
	next.Status.PodName = pod.Name
	next.Status.PodUID = string(pod.UID)
	next.Status.LastRunRequest = req
	r.Recorder.Eventf(vm, pod, corev1.EventTypeNormal, "CreatedPod", "CreatePod", "Created runner pod %s (provider %s)", pod.Name, vm.Spec.Provider)

	if vm.Status.RestartCount == 0 {
		r.Metrics.podCreated(vm, r.now())
	}
	return reconcile.Result{}, pod, nil
}

// podRefused is the API server's refusal of a runner pod for what the VM's spec put in it: the
// CRD cannot check everything a Pod's validation does (affinity, podResources, label values).
type podRefused struct {
	err         error
	podSecurity string // the Pod Security level that refused the pod, when it was that
}

func (e *podRefused) Error() string { return e.err.Error() }

func (e *podRefused) cause() *cause {
	if e.podSecurity != "" {
		return &cause{vmv1.ReasonPodSecurityForbidden, fmt.Sprintf("the namespace enforces Pod Security level %q, which refuses runner pods "+
			"(they need NET_ADMIN, NET_RAW and MKNOD): label the namespace %s=privileged, or run the VM in a namespace that allows it: %s",
			e.podSecurity, podSecurityEnforceLabel, trim(e.err.Error()))}
	}
	return &cause{vmv1.ReasonRunnerPodInvalid, "the API server refused the runner pod (spec.nodeSelector, " +
		"spec.affinity, spec.tolerations and spec.podResources go into it as they are: correct the field it names): " + trim(e.err.Error())}
}

// options are the pod-building options with the image map as it is now.
func (r *Reconciler) options(ctx context.Context) (podspec.Options, error) {
	opts := r.Options
	m, _, err := r.ImageMap.Map(ctx)
	opts.ImageMap = m
	return opts, err
}

// recreate replaces a running pod whose images are no longer the VM's effective ones, for a VM
// that opted in with imageUpdatePolicy Recreate. Status first, guarded like a restart, then the
// delete: the guest gets its clean shutdown and the pod's delete event starts the new one.
func (r *Reconciler) recreate(ctx context.Context, vm, next *vmv1.VirtualMachine, pod *corev1.Pod, want vmv1.Images) error {
	if pod.DeletionTimestamp != nil {
		return nil
	}
	next.Status.PodUID = ""
	setImagesCurrent(&next.Status, vm.Generation, pod, want, true)
	if err := statuspatch.Patch(ctx, r.Client, vm, next); err != nil {
		return r.fail("patch-status", client.IgnoreNotFound(err))
	}
	vm.Status = *next.Status.DeepCopy()
	r.Recorder.Eventf(vm, pod, corev1.EventTypeNormal, "ImagesChanged", "RecreatePod", "Recreating runner pod %s (imageUpdatePolicy Recreate): %s", pod.Name, imagesDiff(podspec.PodImages(pod), want))
	return r.fail("delete-pod", r.deletePod(ctx, pod))
}

// podEnded records how the runner ended and applies the run strategy: a new run, the pod
// removed (Halted), a new run on request, or the end kept.
func (r *Reconciler) podEnded(ctx context.Context, vm, next *vmv1.VirtualMachine, pod *corev1.Pod) error {
	if string(pod.UID) != vm.Status.PodUID {
		if counted(pod, vm) {
			// Already counted (status written, delete lost): finish the restart.
			return r.fail("delete-pod", r.deletePod(ctx, pod))
		}
		// This run's pod, ended before the status write that named it was made (it was lost):
		// its end is still to be counted, and kept under runStrategy Once.
		adopt(next, pod)
	}
	term := termination(pod, r.now())
	failed := pod.Status.Phase == corev1.PodFailed
	next.Status.LastTermination = term
	switch {
	case vm.Spec.Halted():
		return r.stop(ctx, vm, next, pod)
	case restarts(vm.Spec.RunStrategy, failed):
		return r.restart(ctx, vm, next, pod, describe(term))
	case replaceRequested(vm, pod):
		return r.rerun(ctx, vm, next, pod)
	}
	return nil // the Stopped or Failed event follows the status write (announceEnd)
}

// podGone asks the server whether the pod recorded in status still exists.
func (r *Reconciler) podGone(ctx context.Context, vm *vmv1.VirtualMachine) (bool, error) {
	live := &corev1.Pod{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: runnerPodName(vm)}, live)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, r.fail("get-pod", err) // nil when it exists: wait for the cache to see it
}

// announceEnd tells of a guest that stopped for good, once: only the reconcile whose
// resourceVersion-guarded status write recorded the end gets here with the transition.
func (r *Reconciler) announceEnd(vm, next *vmv1.VirtualMachine, pod *corev1.Pod) {
	if terminal(vm.Status.Phase) || !terminal(next.Status.Phase) {
		return
	}
	var related runtime.Object // a nil *Pod in the interface would panic in the recorder
	if pod != nil {
		related = pod
	}
	if next.Status.Phase == vmv1.PhaseFailed {
		r.Recorder.Eventf(vm, related, corev1.EventTypeWarning, "Failed", "Stop", "Guest failed and runStrategy is %s: %s", vm.Spec.EffectiveRunStrategy(), describe(next.Status.LastTermination))
		return
	}
	r.Recorder.Eventf(vm, related, corev1.EventTypeNormal, "Stopped", "Stop", "Guest powered off and runStrategy is %s", vm.Spec.EffectiveRunStrategy())
}

// podVanished treats a pod that disappeared while running as a failure; an ended run's pod
// removed, or a halted VM's, is only let go of.
func (r *Reconciler) podVanished(ctx context.Context, vm, next *vmv1.VirtualMachine) error {
	if stopped(vm) || vm.Spec.Halted() {
		next.Status.PodUID = ""
		return nil
	}
	next.Status.LastTermination = &vmv1.Termination{
		ExitCode: -1, Reason: "RunnerPodDeleted",
		Message:    fmt.Sprintf("runner pod %s was deleted while the guest ran", runnerPodName(vm)),
		FinishedAt: nowTime(r.now()),
	}
	if !restarts(vm.Spec.RunStrategy, true) {
		next.Status.PodUID = ""
		next.Status.Phase = vmv1.PhaseFailed // written, and announced, by Reconcile
		return nil
	}
	return r.restart(ctx, vm, next, nil, next.Status.LastTermination.Message)
}

// restart counts the restart in status first, guarded by the VM's resourceVersion so a stale
// reconcile cannot count it twice, then deletes the ended pod; the delete event starts the next.
func (r *Reconciler) restart(ctx context.Context, vm, next *vmv1.VirtualMachine, pod *corev1.Pod, why string) error {
	next.Status.RestartCount++
	next.Status.PodUID = ""
	next.Status.Phase = vmv1.PhasePending
	if err := statuspatch.Patch(ctx, r.Client, vm, next); err != nil {
		return r.fail("count-restart", err)
	}
	r.Metrics.restarted()
	var related runtime.Object // a nil *Pod in the interface would panic in the recorder
	if pod != nil {
		related = pod
	}
	r.Recorder.Eventf(vm, related, corev1.EventTypeNormal, "Restarting", "Restart", "Restarting guest (restart %d, runStrategy %s): %s", next.Status.RestartCount, vm.Spec.EffectiveRunStrategy(), why)
	vm.Status = next.Status // what the server now holds; the final patch diffs against it
	if pod == nil {
		return nil
	}
	return r.fail("delete-pod", r.deletePod(ctx, pod))
}

func (r *Reconciler) deletePod(ctx context.Context, pod *corev1.Pod) error {
	err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone already, or replaced: nothing of ours to delete
	}
	return err
}

// syncLabels keeps the pod's labels equal to the VM's, so Services follow VM label changes.
func (r *Reconciler) syncLabels(ctx context.Context, vm *vmv1.VirtualMachine, pod *corev1.Pod) error {
	want := podspec.Labels(vm)
	if equality.Semantic.DeepEqual(pod.Labels, want) {
		return nil
	}
	patched := pod.DeepCopy()
	patched.Labels = want
	return r.Client.Patch(ctx, patched, client.MergeFrom(pod))
}

// patchStatus writes what changed, guarded by the resourceVersion read (or of this reconcile's
// own last write), so a reconcile working from a stale cache cannot overwrite newer status.
func (r *Reconciler) patchStatus(ctx context.Context, vm, next *vmv1.VirtualMachine) error {
	return statuspatch.Patch(ctx, r.Client, vm, next)
}

func (r *Reconciler) fail(step string, err error) error {
	if err != nil {
		r.Metrics.reconcileError(step)
		return fmt.Errorf("%s: %w", step, err)
	}
	return nil
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func ownedBy(pod *corev1.Pod, vm *vmv1.VirtualMachine) bool {
	for _, o := range pod.OwnerReferences {
		if o.UID == vm.UID && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}
