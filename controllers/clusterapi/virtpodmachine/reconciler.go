// Package virtpodmachine is the VirtPodMachine controller, the infrastructure-machine half of
// virtpod's Cluster API provider: once the cluster's infrastructure is provisioned and the
// Machine's bootstrap data exists, it creates the machine's VirtualMachine, hands the bootstrap
// Secret to the guest as a cloud-init seed by reference, and reports providerID, addresses and
// provisioned back to Cluster API. Deleting the VirtPodMachine stops and deletes the VM.
package virtpodmachine

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/clusterapi"
	"github.com/virtpod/virtpod/controllers/statuspatch"
	"github.com/virtpod/virtpod/pkg/clusterapi/machinevm"
)

// Finalizer keeps a VirtPodMachine until its VM (and so the guest) is gone.
const Finalizer = "virtpodmachine.infrastructure.cluster.x-k8s.io"

// eventVirtualMachineCreated is the reason of the event that announces the machine's VM; no
// condition carries it.
const eventVirtualMachineCreated = "VirtualMachineCreated"

// Reconciler reconciles VirtPodMachines.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
}

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=virtpodmachines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=virtpodmachines/status,verbs=patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=virtpodmachines/finalizers,verbs=update
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=get;list;watch
// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachines,verbs=get;list;watch;create;delete

// Reconcile runs the steps for one VirtPodMachine.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vpm := &infrav1.VirtPodMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, vpm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if vpm.DeletionTimestamp != nil {
		return reconcile.Result{}, r.delete(ctx, vpm)
	}
	machine, err := clusterapi.OwnerMachine(ctx, r.Client, vpm)
	if err != nil {
		return reconcile.Result{}, err
	}
	var cluster *clusterv1.Cluster
	if machine != nil {
		if cluster, err = clusterapi.MachineCluster(ctx, r.Client, machine); err != nil {
			return reconcile.Result{}, err
		}
	}
	next := vpm.DeepCopy()
	setCondition(next, clusterapi.PausedCondition(cluster, vpm))
	switch {
	case machine == nil || cluster == nil:
		waiting(next, infrav1.ReasonWaitingForOwner, "waiting for Cluster API to make a Machine of an existing Cluster the owner of this VirtPodMachine")
	case clusterapi.Paused(cluster, vpm):
		// Nothing changes while paused; the Paused condition says so.
	default:
		if err := r.steps(ctx, vpm, next, machine, cluster); errors.Is(err, errNameTaken) {
			waiting(next, infrav1.ReasonVirtualMachineNameTaken, err.Error())
			return reconcile.Result{}, errors.Join(err, r.patchStatus(ctx, vpm, next)) // retried with back-off: that VM's events do not reach us
		} else if apierrors.IsConflict(err) {
			return reconcile.Result{}, nil // we read a stale object; the newer one's event brings us back
		} else if err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, r.patchStatus(ctx, vpm, next)
}

// steps: finalizer, wait for the cluster and the bootstrap data, VM, providerID, status.
func (r *Reconciler) steps(ctx context.Context, vpm, next *infrav1.VirtPodMachine, m *clusterv1.Machine, cl *clusterv1.Cluster) error {
	vm, err := r.vm(ctx, vpm)
	if err != nil {
		return err
	}
	if vm == nil {
		switch {
		case !clusterapi.Provisioned(cl.Status.Initialization.InfrastructureProvisioned):
			waiting(next, infrav1.ReasonWaitingForClusterInfrastructure, "waiting for Cluster "+cl.Name+"'s infrastructure to be provisioned")
			return nil
		case m.Spec.Bootstrap.DataSecretName == nil:
			waiting(next, infrav1.ReasonWaitingForBootstrapData, "waiting for the bootstrap provider to set Machine "+m.Name+"'s spec.bootstrap.dataSecretName")
			return nil
		}
		if vm, err = r.create(ctx, vpm, next, m); err != nil || vm == nil {
			return err
		}
	}
	if err := r.providerID(ctx, vpm, next); err != nil {
		return err
	}
	observe(next, vm, m)
	return nil
}

var errNameTaken = errors.New("VirtualMachine name taken")

// vm returns the machine's VM, nil when there is none, or errNameTaken with the VM that holds
// the name when it is not this machine's.
func (r *Reconciler) vm(ctx context.Context, vpm *infrav1.VirtPodMachine) (*vmv1.VirtualMachine, error) {
	vm := &vmv1.VirtualMachine{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: vpm.Namespace, Name: machinevm.Name(vpm)}, vm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !metav1.IsControlledBy(vm, vpm) {
		return vm, fmt.Errorf("%w: VirtualMachine %s exists and does not belong to this VirtPodMachine; delete or rename it", errNameTaken, vm.Name)
	}
	return vm, nil
}

// create adds the finalizer, then creates the VM.
func (r *Reconciler) create(ctx context.Context, vpm, next *infrav1.VirtPodMachine, m *clusterv1.Machine) (*vmv1.VirtualMachine, error) {
	if !controllerutil.ContainsFinalizer(vpm, Finalizer) {
		patched := vpm.DeepCopy() // a copy: the response's status must not replace next's
		controllerutil.AddFinalizer(patched, Finalizer)
		if err := r.Client.Patch(ctx, patched, client.MergeFromWithOptions(vpm, client.MergeFromWithOptimisticLock{})); err != nil {
			return nil, err
		}
		next.ObjectMeta = patched.ObjectMeta
	}
	vm := machinevm.Build(vpm, m)
	if err := r.Client.Create(ctx, vm); apierrors.IsAlreadyExists(err) {
		return nil, nil // the cache had not seen it; its event brings us back
	} else if err != nil {
		msg := fmt.Sprintf("cannot create VirtualMachine %s: %v", vm.Name, err)
		r.Recorder.Eventf(vpm, nil, corev1.EventTypeWarning, "CreateFailed", "CreateVirtualMachine", "%s", msg)
		if apierrors.IsInvalid(err) {
			waiting(next, infrav1.ReasonInvalidVirtualMachine, msg+"; fix spec.virtualMachine in the VirtPodMachineTemplate and roll the machines")
			return nil, nil // retrying cannot help
		}
		return nil, err
	}
	r.Recorder.Eventf(vpm, vm, corev1.EventTypeNormal, eventVirtualMachineCreated, "CreateVirtualMachine", "created VirtualMachine %s for Machine %s (bootstrap data from Secret %s)", vm.Name, m.Name, *m.Spec.Bootstrap.DataSecretName)
	return vm, nil
}

// providerID sets spec.providerID once; Cluster API copies it to the Machine and matches the
// workload cluster's Node by it.
func (r *Reconciler) providerID(ctx context.Context, vpm, next *infrav1.VirtPodMachine) error {
	if next.Spec.ProviderID != "" {
		return nil
	}
	patched := vpm.DeepCopy()
	patched.ResourceVersion = next.ResourceVersion
	base := patched.DeepCopy()
	patched.Spec.ProviderID = machinevm.ProviderID(vpm)
	if err := r.Client.Patch(ctx, patched, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	next.ObjectMeta, next.Spec = patched.ObjectMeta, patched.Spec // the status stays ours to write
	return nil
}

// observe reports the VM: addresses, failure domain, provisioned once it first runs.
func observe(next *infrav1.VirtPodMachine, vm *vmv1.VirtualMachine, m *clusterv1.Machine) {
	next.Status.VirtualMachineName = vm.Name
	next.Status.Addresses = machinevm.Addresses(vm)
	next.Status.FailureDomain = m.Spec.FailureDomain
	running := vm.Status.Phase == vmv1.PhaseRunning
	done := running || clusterapi.Provisioned(next.Status.Initialization.Provisioned)
	next.Status.Initialization.Provisioned, next.Status.Ready = &done, done
	cond := metav1.Condition{Type: infrav1.VirtualMachineReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReasonVirtualMachineRunning,
		Message: "VirtualMachine " + vm.Name + " is running"}
	if !running {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, phaseReasons[vm.Status.EffectivePhase()], vmMessage(vm)
	}
	setCondition(next, cond)
	ready := cond
	ready.Type = infrav1.ReadyCondition
	setCondition(next, ready)
	setBootstrapSucceeded(next, vm)
}

// phaseReasons name a VM's phase on VirtualMachineReady: VirtualMachine<phase>.
var phaseReasons = map[vmv1.Phase]string{
	vmv1.PhasePending:    infrav1.ReasonVirtualMachinePending,
	vmv1.PhaseScheduling: infrav1.ReasonVirtualMachineScheduling,
	vmv1.PhaseStarting:   infrav1.ReasonVirtualMachineStarting,
	vmv1.PhaseRunning:    infrav1.ReasonVirtualMachineRunning,
	vmv1.PhaseStopping:   infrav1.ReasonVirtualMachineStopping,
	vmv1.PhaseStopped:    infrav1.ReasonVirtualMachineStopped,
	vmv1.PhaseSuspended:  infrav1.ReasonVirtualMachineSuspended,
	vmv1.PhaseSucceeded:  infrav1.ReasonVirtualMachineSucceeded,
	vmv1.PhaseFailed:     infrav1.ReasonVirtualMachineFailed,
}

// vmMessage passes on why the VM does not run, from its own Ready condition.
func vmMessage(vm *vmv1.VirtualMachine) string {
	msg := "VirtualMachine " + vm.Name + " is " + string(vm.Status.EffectivePhase())
	if c := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionReady); c != nil && c.Message != "" {
		msg += ": " + c.Message
	}
	return msg
}

// delete stops and deletes the VM, waits until its runner pod is gone (foreground deletion), then
// lets the VirtPodMachine go. A VM of that name the machine does not control is left alone.
func (r *Reconciler) delete(ctx context.Context, vpm *infrav1.VirtPodMachine) error {
	if !controllerutil.ContainsFinalizer(vpm, Finalizer) {
		return nil
	}
	vm, err := r.vm(ctx, vpm)
	if errors.Is(err, errNameTaken) {
		// The machine's VM is gone and another holds its name: that one is not ours to delete,
		// and waiting for it would keep the finalizer forever.
		r.Recorder.Eventf(vpm, vm, corev1.EventTypeWarning, infrav1.ReasonVirtualMachineNameTaken, "RemoveFinalizer",
			"VirtualMachine %s does not belong to this VirtPodMachine: left alone; the VirtPodMachine goes without it", vm.Name)
		vm = nil
	} else if err != nil {
		return err
	}
	if vm != nil {
		if vm.DeletionTimestamp == nil {
			if err := r.Client.Delete(ctx, vm, client.PropagationPolicy(metav1.DeletePropagationForeground)); client.IgnoreNotFound(err) != nil {
				return err
			}
			r.Recorder.Eventf(vpm, vm, corev1.EventTypeNormal, infrav1.ReasonDeleting, "DeleteVirtualMachine", "deleting VirtualMachine %s; the guest is stopped first", vm.Name)
		}
		next := vpm.DeepCopy()
		waiting(next, infrav1.ReasonDeleting, "waiting for VirtualMachine "+vm.Name+" and its runner pod to be deleted")
		return r.patchStatus(ctx, vpm, next) // the VM's delete event brings us back
	}
	patched := vpm.DeepCopy()
	controllerutil.RemoveFinalizer(patched, Finalizer)
	return client.IgnoreNotFound(r.Client.Patch(ctx, patched, client.MergeFromWithOptions(vpm, client.MergeFromWithOptimisticLock{})))
}

func waiting(next *infrav1.VirtPodMachine, reason, msg string) {
	for _, t := range []string{infrav1.ReadyCondition, infrav1.VirtualMachineReadyCondition} {
		setCondition(next, metav1.Condition{Type: t, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
	}
}

func setCondition(vpm *infrav1.VirtPodMachine, c metav1.Condition) {
	c.ObservedGeneration = vpm.Generation
	meta.SetStatusCondition(&vpm.Status.Conditions, c)
}

// patchStatus writes the status when it changed.
func (r *Reconciler) patchStatus(ctx context.Context, vpm, next *infrav1.VirtPodMachine) error {
	next.Status.ObservedGeneration = next.Generation
	return statuspatch.IgnoreStale(statuspatch.Patch(ctx, r.Client, vpm, next))
}
