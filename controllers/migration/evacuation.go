package migration

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// Evacuator makes node drains migrate VMs with evictionStrategy LiveMigrate instead of stopping
// them: a PodDisruptionBudget with maxUnavailable 0 over the VM's runner pods makes the drain's
// evictions wait (429), and a VM on a cordoned node gets the migration <vm>-evacuation, after
// which its source pod is deleted and the drain goes on. One reconcile per VM.
type Evacuator struct {
	Client   client.Client
	Recorder events.EventRecorder
}

// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// AnnotationEvacuatedPod is, on an evacuation migration, the UID of the runner pod it was made
// to move: a failed one is not made again for that pod (its reason says why), but is for the
// VM's next pod.
const AnnotationEvacuatedPod = "vm.virtpod.io/evacuated-pod"

// PDBName is the PodDisruptionBudget of a LiveMigrate VM.
func PDBName(vmName string) string { return vmName + "-live-migrate" }

// EvacuationName is the migration that moves a VM off a cordoned node.
func EvacuationName(vmName string) string { return vmName + vmv1.EvacuationSuffix }

// Reconcile keeps one VM's budget and, on a cordoned node, its evacuation.
func (e *Evacuator) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vm := &vmv1.VirtualMachine{}
	if err := e.Client.Get(ctx, req.NamespacedName, vm); err != nil || vm.DeletionTimestamp != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err) // the garbage collector removes the budget
	}
	live := vm.Spec.EvictionStrategy == vmv1.EvictionLiveMigrate
	if err := e.budget(ctx, vm, live); err != nil || !live {
		return reconcile.Result{}, err
	}
	if vm.Status.Phase != vmv1.PhaseRunning || vm.Status.Node == "" || vm.Status.PodUID == "" {
		return reconcile.Result{}, nil
	}
	node := &corev1.Node{}
	if err := e.Client.Get(ctx, types.NamespacedName{Name: vm.Status.Node}, node); err != nil || !node.Spec.Unschedulable {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	key := types.NamespacedName{Namespace: vm.Namespace, Name: EvacuationName(vm.Name)}
	old := &vmv1.VirtualMachineMigration{}
	switch err := e.Client.Get(ctx, key, old); {
	case err == nil && !old.Status.Terminal():
		return reconcile.Result{}, nil // moving
	case err == nil && old.Annotations[AnnotationEvacuatedPod] == vm.Status.PodUID:
		return reconcile.Result{}, nil // tried for this pod and failed: its reason says why; delete it to try again
	case err == nil:
		// An earlier evacuation, of a pod the VM no longer runs: make room for this one (its
		// delete event brings us back).
		return reconcile.Result{}, client.IgnoreNotFound(e.Client.Delete(ctx, old, client.Preconditions{UID: &old.UID}))
	case !apierrors.IsNotFound(err):
		return reconcile.Result{}, err
	}
	mig := &vmv1.VirtualMachineMigration{
		ObjectMeta: metav1.ObjectMeta{
			Name: key.Name, Namespace: key.Namespace,
			Labels:          map[string]string{podspec.LabelManagedBy: podspec.ManagedBy, podspec.LabelVMName: vm.Name},
			Annotations:     map[string]string{AnnotationEvacuatedPod: vm.Status.PodUID},
			OwnerReferences: []metav1.OwnerReference{owner(vm)},
		},
		Spec: vmv1.VirtualMachineMigrationSpec{VMName: vm.Name},
	}
	if err := e.Client.Create(ctx, mig); err != nil {
		return reconcile.Result{}, client.IgnoreAlreadyExists(err)
	}
	e.Recorder.Eventf(vm, mig, corev1.EventTypeNormal, "Evacuating", "Migrate", "Node %s is cordoned and evictionStrategy is LiveMigrate: migrating the guest (VirtualMachineMigration %s)", node.Name, mig.Name)
	return reconcile.Result{}, nil
}

// budget keeps the VM's PodDisruptionBudget while it is LiveMigrate and removes it after.
func (e *Evacuator) budget(ctx context.Context, vm *vmv1.VirtualMachine, want bool) error {
	pdb := &policyv1.PodDisruptionBudget{}
	err := e.Client.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: PDBName(vm.Name)}, pdb)
	if client.IgnoreNotFound(err) != nil {
		return err
	}
	exists := err == nil
	switch {
	case exists && !metav1.IsControlledBy(pdb, vm):
		if want {
			e.Recorder.Eventf(vm, pdb, corev1.EventTypeWarning, "BudgetNameTaken", "Evacuate", "PodDisruptionBudget %s exists and is not this VirtualMachine's: delete or rename it", pdb.Name)
		}
		return nil
	case exists && !want:
		return client.IgnoreNotFound(e.Client.Delete(ctx, pdb, client.Preconditions{UID: &pdb.UID}))
	case exists || !want:
		return nil
	}
	pdb = &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{
			Name: PDBName(vm.Name), Namespace: vm.Namespace,
			Labels:          map[string]string{podspec.LabelManagedBy: podspec.ManagedBy, podspec.LabelVMName: vm.Name},
			OwnerReferences: []metav1.OwnerReference{owner(vm)},
		},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{podspec.LabelVMName: vm.Name}},
		},
	}
	if err := e.Client.Create(ctx, pdb); err != nil {
		return client.IgnoreAlreadyExists(err)
	}
	e.Recorder.Eventf(vm, pdb, corev1.EventTypeNormal, "CreatedBudget", "Evacuate", "evictionStrategy LiveMigrate: PodDisruptionBudget %s holds evictions of the runner pod; a drain migrates the guest", pdb.Name)
	return nil
}

func owner(vm *vmv1.VirtualMachine) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: vmv1.GroupVersion.String(), Kind: "VirtualMachine", Name: vm.Name, UID: vm.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}
