package migration

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// SetupWithManager registers the migration controller: migrations, the runner pods marked with
// one (the agents' annotations, the kubelet's status) and the VMs they move drive it.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, skipNameValidation bool) error {
	marked := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetAnnotations()[vmv1.AnnotationMigration] != "" })
	return ctrl.NewControllerManagedBy(mgr).
		Named("virtualmachinemigration").
		For(&vmv1.VirtualMachineMigration{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.migrationOfPod), builder.WithPredicates(marked)).
		Watches(&vmv1.VirtualMachine{}, handler.EnqueueRequestsFromMapFunc(r.migrationsOfVM)).
		WithOptions(controller.Options{SkipNameValidation: &skipNameValidation}).
		Complete(r)
}

func (r *Reconciler) migrationOfPod(ctx context.Context, o client.Object) []reconcile.Request {
	uid := o.GetAnnotations()[vmv1.AnnotationMigration]
	return r.select_(ctx, o.GetNamespace(), func(m *vmv1.VirtualMachineMigration) bool { return string(m.UID) == uid })
}

func (r *Reconciler) migrationsOfVM(ctx context.Context, o client.Object) []reconcile.Request {
	return r.select_(ctx, o.GetNamespace(), func(m *vmv1.VirtualMachineMigration) bool {
		return m.Spec.VMName == o.GetName() && !m.Status.Terminal()
	})
}

func (r *Reconciler) select_(ctx context.Context, namespace string, keep func(*vmv1.VirtualMachineMigration) bool) []reconcile.Request {
	list := &vmv1.VirtualMachineMigrationList{}
	if err := r.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if keep(&list.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// SetupWithManager registers the evacuator: VMs, their budgets and evacuations, and nodes being
// cordoned or uncordoned (nothing else of a node: heartbeats never reach it).
func (e *Evacuator) SetupWithManager(mgr ctrl.Manager, skipNameValidation bool) error {
	cordon := predicate.Funcs{
		CreateFunc: func(ev event.CreateEvent) bool { return ev.Object.(*corev1.Node).Spec.Unschedulable },
		UpdateFunc: func(ev event.UpdateEvent) bool {
			return ev.ObjectOld.(*corev1.Node).Spec.Unschedulable != ev.ObjectNew.(*corev1.Node).Spec.Unschedulable
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("evacuation").
		For(&vmv1.VirtualMachine{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&vmv1.VirtualMachineMigration{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(e.vmsOnNode), builder.WithPredicates(cordon)).
		WithOptions(controller.Options{SkipNameValidation: &skipNameValidation}).
		Complete(e)
}

func (e *Evacuator) vmsOnNode(ctx context.Context, o client.Object) []reconcile.Request {
	list := &vmv1.VirtualMachineList{}
	if err := e.Client.List(ctx, list); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if vm := &list.Items[i]; vm.Status.Node == o.GetName() && vm.Spec.EvictionStrategy == vmv1.EvictionLiveMigrate {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(vm)})
		}
	}
	return reqs
}
