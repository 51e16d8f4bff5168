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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// The runner pod itself: finding the VM's (and refusing someone else's under its name), making
// it, and the writes to it that are not about power (labels, deletes).

// runnerPod is the VM's runner pod, from the cache: nil when there is none yet. Someone else's
// pod under its name is an error (checkOwner), unless the VM is halted and needs none.
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

// current says whether the VM read is the one the server holds. A restart's pod is made only
// from that: a cache behind the restart the server counted would skip its back-off and label
// the pod with an earlier run. When it is behind, the newer VM's event brings us back.
func (r *Reconciler) current(ctx context.Context, vm *vmv1.VirtualMachine) (bool, error) {
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(vmv1.GroupVersion.WithKind("VirtualMachine"))
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(vm), live); err != nil {
		return false, r.fail("get-vm", client.IgnoreNotFound(err))
	}
	return live.ResourceVersion == vm.ResourceVersion, nil
}

// madeFromStaleView says the live pod that earlierRun judged a cache behind the server is not:
// the server holds this VM (restart counted) and this pod, live. Only a reconcile that read the
// VM from before the count could have made it (a pod of an earlier run that ended or went was
// counted, and it cannot come back); left alone it would never be named.
func (r *Reconciler) madeFromStaleView(ctx context.Context, vm *vmv1.VirtualMachine, pod *corev1.Pod) (bool, error) {
	if current, err := r.current(ctx, vm); err != nil || !current {
		return false, err
	}
	live, err := r.stillThere(ctx, pod)
	return live != nil && !podEnded(live), err
}

// adoptable says whether a pod the VM's status does not name is still there on the API server,
// not being deleted: the cache may still show one this controller deleted a moment ago (a stop,
// a recreate, a suspend's end), which must not become the VM's again. Its deletion's event
// brings the VM back when it is not.
func (r *Reconciler) adoptable(ctx context.Context, pod *corev1.Pod) (bool, error) {
	live, err := r.stillThere(ctx, pod)
	return live != nil, err
}

// stillThere is pod as the API server holds it, or nil when it is gone, replaced (another UID)
// or being deleted.
func (r *Reconciler) stillThere(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	live := &corev1.Pod{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pod), live); err != nil {
		return nil, r.fail("get-pod", client.IgnoreNotFound(err))
	}
	if live.UID != pod.UID || live.DeletionTimestamp != nil {
		return nil, nil
	}
	return live, nil
}

// relabelRun marks pod as the current run's (its restart-count annotation), so that its end is
// counted as this run's.
func (r *Reconciler) relabelRun(ctx context.Context, vm *vmv1.VirtualMachine, pod *corev1.Pod) error {
	patch := client.MergeFrom(pod.DeepCopy())
	metav1.SetMetaDataAnnotation(&pod.ObjectMeta, AnnotationRestartCount, strconv.Itoa(int(vm.Status.RestartCount)))
	if err := r.Client.Patch(ctx, pod, patch); err != nil {
		return r.fail("relabel-pod", err)
	}
	r.Recorder.Eventf(vm, pod, corev1.EventTypeNormal, "AdoptedPod", "AdoptPod", "Runner pod %s, made from a view of the VM before restart %d was counted, is that run's", pod.Name, vm.Status.RestartCount)
	return nil
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

// startPod creates the runner pod, after the restart back-off when the guest is restarting.
func (r *Reconciler) startPod(ctx context.Context, vm, next *vmv1.VirtualMachine, opts podspec.Options) (reconcile.Result, *corev1.Pod, error) {
	if stopped(vm) || vm.Spec.Halted() {
		return reconcile.Result{}, nil, nil
	}
	if wait := restartWait(vm, r.now()); wait > 0 {
		next.Status.Phase = vmv1.PhasePending
		return reconcile.Result{RequeueAfter: wait}, nil, nil
	}
	if vm.Status.RestartCount > 0 {
		if current, err := r.current(ctx, vm); err != nil || !current {
			return reconcile.Result{}, nil, err
		}
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
			"(they need no more than level restricted: no capability, not root): label the namespace %s=restricted, or run the VM in a namespace that allows it: %s",
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

func ownedBy(pod *corev1.Pod, vm *vmv1.VirtualMachine) bool {
	for _, o := range pod.OwnerReferences {
		if o.UID == vm.UID && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}
