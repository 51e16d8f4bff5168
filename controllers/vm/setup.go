package vm

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// SetupWithManager registers the controller: VirtualMachines, the pods they own and, with an
// image map, its ConfigMap drive it; nothing polls.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, workers int, skipNameValidation bool) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &vmv1.VirtualMachine{}, indexNode, func(o client.Object) []string {
		if n := o.(*vmv1.VirtualMachine).Status.Node; n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := r.indexDisks(mgr); err != nil {
		return err
	}
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
	// A class's change (enabled, emulation, selector) concerns the VMs that name it, and those
	// that name none while it is the default.
	b = b.Watches(&vmv1.ProviderClass{}, handler.EnqueueRequestsFromMapFunc(r.vmsOfClass))
	// A node report's change can change why a waiting VM does not fit; heartbeats alone cannot.
	b = b.Watches(&vmv1.HypervisorNode{}, handler.EnqueueRequestsFromMapFunc(r.waitingVMs),
		builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*vmv1.HypervisorNode), e.ObjectNew.(*vmv1.HypervisorNode)
			return !o.Status.SameReport(&n.Status)
		}}))
	// A node that stops being ready, recovers or is deleted changes what its VMs can say;
	// heartbeats alone cannot.
	b = b.Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.vmsOnNode),
		builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			return nodeReadyStatus(e.ObjectOld.(*corev1.Node)) != nodeReadyStatus(e.ObjectNew.(*corev1.Node))
		}}))
	// A namespace whose Pod Security labels change may now admit the runner pods it refused.
	b = b.Watches(&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}},
		handler.EnqueueRequestsFromMapFunc(r.vmsRefusedByPodSecurity),
		builder.OnlyMetadata, builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false }, DeleteFunc: func(event.DeleteEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false }, UpdateFunc: podSecurityChanged}))
	b, err := r.watchDisks(mgr, b)
	if err != nil {
		return err
	}
	return b.Complete(r)
}

func (r *Reconciler) vmsOfClass(ctx context.Context, o client.Object) []reconcile.Request {
	return r.selectVMs(ctx, func(vm *vmv1.VirtualMachine) bool {
		return string(vm.Spec.Provider) == o.GetName() || vm.Spec.Provider == ""
	})
}

func (r *Reconciler) waitingVMs(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.selectVMs(ctx, func(vm *vmv1.VirtualMachine) bool {
		return vm.Status.Phase == vmv1.PhaseScheduling || vm.Status.Phase == vmv1.PhasePending
	})
}

func (r *Reconciler) allVMs(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.selectVMs(ctx, func(*vmv1.VirtualMachine) bool { return true })
}

func (r *Reconciler) selectVMs(ctx context.Context, keep func(*vmv1.VirtualMachine) bool) []reconcile.Request {
	list := &vmv1.VirtualMachineList{}
	if err := r.Client.List(ctx, list); err != nil {
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
