package vm

import (
	"context"

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

// SetupWithManager registers the controller: VirtualMachines, the pods they own and, with an
// image map, its ConfigMap drive it; nothing polls.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, workers int, skipNameValidation bool) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("virtualmachine").
		For(&vmv1.VirtualMachine{}).
		Owns(&corev1.Pod{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers, SkipNameValidation: &skipNameValidation})
	if r.ImageMap != nil {
		key := r.ImageMap.Key
		// A change of the map can change any VM's effective images.
		b = b.Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.allVMs),
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				return o.GetNamespace() == key.Namespace && o.GetName() == key.Name
			})))
	}
	return b.Complete(r)
}

func (r *Reconciler) allVMs(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &vmv1.VirtualMachineList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, vm := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&vm)})
	}
	return reqs
}
