package migration

import (
	"context"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
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
// which its source pod is deleted and the drain goes on. The budget is kept only while the VM's
// Migratable condition is True, so a VM that cannot move never blocks a drain; a failed
// evacuation is made again after a back-off while the node stays cordoned. One reconcile per VM.
type Evacuator struct {
	Client   client.Client
	Recorder events.EventRecorder
	Now      func() time.Time // nil: time.Now
}

// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// AnnotationEvacuatedPod is, on an evacuation migration, the UID of the runner pod it was made
// to move: a failed one is made again for that pod only after its back-off (see retry), and at
// once for the VM's next pod.
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
	migratable := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionMigratable)
	canMove := migratable != nil && migratable.Status == metav1.ConditionTrue
	if err := e.budget(ctx, vm, live, canMove); err != nil || !live {
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
	err := e.Client.Get(ctx, key, old)
	switch {
	case err == nil && !old.Status.Terminal():
		return reconcile.Result{}, nil // moving: the pod's Evacuating event says so
	case err == nil && old.DeletionTimestamp != nil:
		return reconcile.Result{}, nil // its removal brings us back
	case err == nil && old.Annotations[AnnotationEvacuatedPod] == vm.Status.PodUID && old.Status.Phase == vmv1.MigrationFailed && canMove:
		return e.retry(ctx, vm, node, old)
	case err == nil && old.Annotations[AnnotationEvacuatedPod] == vm.Status.PodUID && old.Status.Phase == vmv1.MigrationFailed:
		// Not retried while the guest cannot move: no budget holds the drain (below).
	case err == nil && old.Annotations[AnnotationEvacuatedPod] == vm.Status.PodUID:
		return reconcile.Result{}, nil // moved: the VM's status turns to the target's pod
	case err == nil:
		// An earlier evacuation, of a pod the VM no longer runs: make room for this one (its
		// delete event brings us back).
		return reconcile.Result{}, client.IgnoreNotFound(e.Client.Delete(ctx, old, client.Preconditions{UID: &old.UID}))
	case !apierrors.IsNotFound(err):
		return reconcile.Result{}, err
	}
	if !canMove {
		// No budget holds the drain: the pod is evicted, and the guest restarts elsewhere.
		e.Recorder.Eventf(runnerPod(vm), vm, corev1.EventTypeWarning, vmv1.EventBudgetWithheld, "Evacuate",
			"Node %s is cordoned, but VirtualMachine %s cannot migrate (%s): an eviction stops the guest, which restarts per runStrategy", node.Name, vm.Name, why(migratable))
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, e.evacuate(ctx, vm, node, 1)
}

// evacuate makes the evacuation migration, attempt n for the VM's pod, and says so on the VM and
// on the pod whose evictions wait for it.
func (e *Evacuator) evacuate(ctx context.Context, vm *vmv1.VirtualMachine, node *corev1.Node, n int) error {
	mig := &vmv1.VirtualMachineMigration{
		ObjectMeta: metav1.ObjectMeta{
			Name: EvacuationName(vm.Name), Namespace: vm.Namespace,
			Labels:          map[string]string{vmv1.LabelManagedBy: vmv1.ManagedBy, podspec.LabelVMName: vm.Name},
			Annotations:     map[string]string{AnnotationEvacuatedPod: vm.Status.PodUID, AnnotationEvacuationAttempt: strconv.Itoa(n)},
			OwnerReferences: []metav1.OwnerReference{owner(vm)},
		},
		Spec: vmv1.VirtualMachineMigrationSpec{VMName: vm.Name},
	}
	if err := e.Client.Create(ctx, mig); err != nil {
		return client.IgnoreAlreadyExists(err)
	}
	e.Recorder.Eventf(vm, mig, corev1.EventTypeNormal, vmv1.EventEvacuating, "Migrate", "Node %s is cordoned and evictionStrategy is LiveMigrate: migrating the guest (VirtualMachineMigration %s, attempt %d)", node.Name, mig.Name, n)
	e.Recorder.Eventf(runnerPod(vm), mig, corev1.EventTypeNormal, vmv1.EventEvacuating, "Migrate",
		"Node %s is cordoned: evictions of this pod wait (PodDisruptionBudget %s) while VirtualMachineMigration %s moves the guest (attempt %d)", node.Name, PDBName(vm.Name), mig.Name, n)
	return nil
}

// runnerPod stands for the VM's runner pod in an event: the pod a drain evicts, whose events
// kubectl drain users read.
func runnerPod(vm *vmv1.VirtualMachine) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: vm.Status.PodName, UID: types.UID(vm.Status.PodUID)}}
}

func why(c *metav1.Condition) string {
	if c == nil {
		return "its Migratable condition is not set yet"
	}
	return c.Reason + ": " + c.Message
}

// budget keeps the VM's PodDisruptionBudget while it is LiveMigrate and migratable, and removes
// it after: a budget over a guest that cannot move would hold a drain forever.
func (e *Evacuator) budget(ctx context.Context, vm *vmv1.VirtualMachine, live, canMove bool) error {
	want := live && canMove
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
		if err := e.Client.Delete(ctx, pdb, client.Preconditions{UID: &pdb.UID}); err != nil {
			return client.IgnoreNotFound(err)
		}
		if live {
			e.Recorder.Eventf(vm, pdb, corev1.EventTypeWarning, vmv1.EventBudgetWithheld, "Evacuate",
				"the guest cannot migrate (%s): PodDisruptionBudget %s removed, so a drain stops the guest, which restarts per runStrategy",
				why(meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionMigratable)), pdb.Name)
		}
		return nil
	case exists || !want:
		return nil
	}
	pdb = &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{
			Name: PDBName(vm.Name), Namespace: vm.Namespace,
			Labels:          map[string]string{vmv1.LabelManagedBy: vmv1.ManagedBy, podspec.LabelVMName: vm.Name},
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
