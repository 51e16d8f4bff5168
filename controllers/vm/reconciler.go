// Package vm is the VirtualMachine controller: it turns each VirtualMachine into one runner pod,
// starts, stops and restarts the guest per the VM's run strategy and run requests, and reports
// what it sees in the VM's status.
package vm

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachinemigrations,verbs=create

// Reconcile brings one VM's runner pod and status in line with its spec, in steps: the
// provider, the runner pod and its disks, power (the run strategy), the running guest (resize,
// migratable), then the status and its events. Each step reads and fills the scope.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vm := &vmv1.VirtualMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, vm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if vm.DeletionTimestamp != nil {
		return reconcile.Result{}, nil // the garbage collector deletes the pod; its grace period stops the guest
	}
	s := &scope{vm: vm}
	if defaulted, err := r.reconcileProvider(ctx, s); err != nil || defaulted {
		return reconcile.Result{}, err // a defaulted provider's update event brings us back
	}
	if err := r.reconcilePod(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	if done, err := r.reconcilePower(ctx, s); err != nil || done {
		return reconcile.Result{}, err
	}
	if err := r.reconcileGuest(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	return r.reconcileStatus(ctx, s)
}

// scope is one reconcile's state: what the steps read, decided and changed, in one place
// rather than threaded through every call.
type scope struct {
	// vm is the VM as read; a step that writes status early (a restart, a stop) updates its
	// status to what the server holds, which the final patch diffs against.
	vm *vmv1.VirtualMachine
	// next is the VM as this reconcile leaves it.
	next *vmv1.VirtualMachine
	// pod is the runner pod; nil when there is none (or it is gone once a restart deleted it).
	pod    *corev1.Pod
	prov   verdict         // what the VM's ProviderClass allows
	opts   podspec.Options // the pod-building options, with the image map and the class
	images vmv1.Images     // the VM's effective images
	disks  diskFacts       // whether what the disks name is there
	held   *cause          // why no runner pod is started, shown on Scheduled and Ready

	resized *resizePlan         // the running guest's resize; nil while none runs
	movable *migratable.Verdict // whether the running guest can move; nil while none runs
	agent   *agentView          // what the running guest's agent said; nil while none runs
	result  reconcile.Result    // a restart back-off's requeue

	attachments   map[string]*corev1.Pod // the attachment pods serving the runner pod, by disk
	hotplugDigest *string                // the hotplug request to write on the runner pod after the status; nil: none
	hotplugFailed map[string]string      // the node agent's hotplug errors, by disk, for events
}

// reconcileProvider finds the VM's ProviderClass and its verdict, or defaults spec.provider;
// defaulted says the VM was patched, so this reconcile ends.
func (r *Reconciler) reconcileProvider(ctx context.Context, s *scope) (defaulted bool, err error) {
	if s.vm.Spec.Provider != "" {
		s.prov, err = r.provider(ctx, s.vm)
		return false, err
	}
	defaulted, s.prov, err = r.defaultProvider(ctx, s.vm)
	return defaulted, err
}

// reconcilePod reads the runner pod, the options a pod is built with and the disks' state.
func (r *Reconciler) reconcilePod(ctx context.Context, s *scope) error {
	var err error
	if s.pod, err = r.runnerPod(ctx, s.vm); err != nil {
		return err
	}
	if s.opts, err = r.options(ctx); err != nil {
		return r.fail("image-map", err)
	}
	s.opts.Class = s.prov.class
	s.images = podspec.Images(s.vm, s.opts)
	if s.disks, err = r.checkDisks(ctx, s.vm, s.pod); err != nil {
		return err
	}
	s.opts.Claims = s.disks.claims
	s.next = s.vm.DeepCopy()
	return nil
}

// reconcileGuest resizes a running guest (resize.go) and brings its hotpluggable disks to the
// spec (hotplug.go), judges whether it can be live-migrated,
// reads what its agent said (guestagent.go) and pins its machine type (machine.go):
// only the pod this status runs, kept running. Not while the guest migrates: the target is a
// copy of this pod at its size now, so the size is frozen.
func (r *Reconciler) reconcileGuest(ctx context.Context, s *scope) error {
	vm, pod := s.vm, s.pod
	var err error
	if s.attachments, err = r.dropAttachments(ctx, vm, pod); err != nil {
		return err
	}
	if pod == nil || pod.DeletionTimestamp != nil || podEnded(pod) || vm.Spec.Halted() || !guestStarted(pod) || s.next.Status.PodUID != string(pod.UID) {
		if pod == nil && vm.Status.SuspendedState == nil {
			s.next.Status.Disks = nil // a suspended guest keeps its slots for the resume (podspec)
		}
		return nil
	}
	if migrating(pod) {
		s.resized = frozenResize(vm, pod)
	} else {
		p, err := r.resize(ctx, vm, pod, s.opts)
		if err != nil {
			return err
		}
		s.resized = &p
		if err := r.hotplug(ctx, s); err != nil {
			return err
		}
	}
	v := migratable.Check(vm, pod)
	s.movable = &v
	s.agent = guestAgent(vm, pod)
	if err := r.liveUpdate(ctx, s); err != nil {
		return err
	}
	return r.pinMachine(ctx, s)
}

// reconcileStatus decides every condition from what the steps found (conditions.go), writes
// the status, and tells of the transitions that write made.
func (r *Reconciler) reconcileStatus(ctx context.Context, s *scope) (reconcile.Result, error) {
	vm, next, pod := s.vm, s.next, s.pod
	// What the conditions are decided from, read before any is set.
	f := facts{pod: pod, held: s.held, halted: haltedCause(vm), stopping: stoppingCause(next, pod)}
	var err error
	if f.lost, err = r.nodeHealth(ctx, vm, pod); err != nil {
		return reconcile.Result{}, err
	}
	if f.fit, err = r.whyNot(ctx, vm, pod, s.prov.class); err != nil {
		return reconcile.Result{}, err
	}
	st, gen := &next.Status, vm.Generation
	observe(st, gen, pod, vm.Spec.Halted(), vm.Spec.Suspend)
	setScheduled(st, gen, f)
	setReady(st, gen, f)
	setImagesCurrent(st, gen, pod, s.images, false)
	setProviderAvailable(st, gen, s.prov)
	setSoftwareEmulation(st, vm)
	setDisksReady(st, gen, s.disks)
	setResized(st, gen, s.resized)
	setMigratable(st, gen, s.movable)
	setAgentConnected(st, gen, s.agent)
	setSuspended(st, gen, suspendViewOf(vm, next, pod))
	if err := r.patchStatus(ctx, vm, next); apierrors.IsConflict(err) {
		return reconcile.Result{}, nil // we read a stale VM; the newer one's event brings us back
	} else if err != nil {
		return reconcile.Result{}, r.fail("patch-status", err)
	}
	r.announceProvider(vm, next)
	r.announceEnd(vm, next, pod)
	r.announcePower(vm, next, pod)
	r.announceResize(vm, next, pod)
	r.announceSuspend(vm, next, pod)
	r.announceHotplug(vm, next, pod, s.hotplugFailed)
	if err := r.requestHotplug(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	r.Metrics.observe(vm, next, r.now())
	return s.result, nil
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
