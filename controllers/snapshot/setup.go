package snapshot

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// SetupWithManager registers both controllers: snapshots wake on their copier pods, on the
// runner pods marked for them (the agent's answer) and on their VMs; restores on their copier
// pods, their snapshots and their VMs.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, skipNameValidation bool) error {
	if r.Now == nil {
		r.Now = time.Now
	}
	marked := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetAnnotations()[vmv1.AnnotationSnapshot] != "" })
	err := ctrl.NewControllerManagedBy(mgr).
		Named("virtualmachinesnapshot").
		For(&vmv1.VirtualMachineSnapshot{}).
		Owns(&corev1.Pod{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetAnnotations()[vmv1.AnnotationSnapshot]}}}
		}), builder.WithPredicates(marked)).
		Watches(&vmv1.VirtualMachine{}, handler.EnqueueRequestsFromMapFunc(r.snapshotsOfVM)).
		WithOptions(controller.Options{SkipNameValidation: &skipNameValidation}).
		Complete(r)
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("virtualmachinerestore").
		For(&vmv1.VirtualMachineRestore{}).
		Owns(&corev1.Pod{}).
		Watches(&vmv1.VirtualMachineSnapshot{}, handler.EnqueueRequestsFromMapFunc(r.restoresOf(func(rs *vmv1.VirtualMachineRestore, o client.Object) bool {
			return rs.Spec.SnapshotName == o.GetName()
		}))).
		Watches(&vmv1.VirtualMachine{}, handler.EnqueueRequestsFromMapFunc(r.restoresOf(func(rs *vmv1.VirtualMachineRestore, o client.Object) bool {
			return rs.Spec.VMName == o.GetName()
		}))).
		WithOptions(controller.Options{SkipNameValidation: &skipNameValidation}).
		Complete(RestoreReconciler{r})
}

// snapshotsOfVM are the VM's snapshots that have not ended.
func (r *Reconciler) snapshotsOfVM(ctx context.Context, o client.Object) []reconcile.Request {
	list := &vmv1.VirtualMachineSnapshotList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if s := &list.Items[i]; s.Spec.VMName == o.GetName() && !s.Status.Terminal() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)})
		}
	}
	return reqs
}

// restoresOf maps an object to the restores not ended that name it.
func (r *Reconciler) restoresOf(names func(*vmv1.VirtualMachineRestore, client.Object) bool) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := &vmv1.VirtualMachineRestoreList{}
		if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		for i := range list.Items {
			if rs := &list.Items[i]; names(rs, o) && !rs.Status.Terminal() {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(rs)})
			}
		}
		return reqs
	}
}
