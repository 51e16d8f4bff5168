package virtpodmachine

import (
	"context"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/clusterapi"
)

// SetupWithManager registers the controller: VirtPodMachines, the VMs they own, their Machines
// (owner, bootstrap data, failure domain) and their Clusters (provisioned, pause) drive it.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, workers int, skipNameValidation bool) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("virtpodmachine").
		For(&infrav1.VirtPodMachine{}).
		Owns(&vmv1.VirtualMachine{}).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(infraMachine)).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.clusterMachines),
			builder.WithPredicates(clusterChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers, SkipNameValidation: &skipNameValidation}).
		Complete(r)
}

// infraMachine maps a Machine to the VirtPodMachine it references.
func infraMachine(_ context.Context, o client.Object) []reconcile.Request {
	m := o.(*clusterv1.Machine)
	return clusterapi.InfraRequest(m.Namespace, m.Spec.InfrastructureRef, "VirtPodMachine")
}

// clusterChanged passes what the machines wait on: provisioned infrastructure and pause.
var clusterChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*clusterv1.Cluster), e.ObjectNew.(*clusterv1.Cluster)
		return clusterapi.Provisioned(o.Status.Initialization.InfrastructureProvisioned) != clusterapi.Provisioned(n.Status.Initialization.InfrastructureProvisioned) ||
			clusterapi.Paused(o, o) != clusterapi.Paused(n, n)
	},
}

// clusterMachines are the VirtPodMachines of a Cluster.
func (r *Reconciler) clusterMachines(ctx context.Context, o client.Object) []reconcile.Request {
	list := &infrav1.VirtPodMachineList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingLabels{infrav1.ClusterNameLabel: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the VirtPodMachines of a Cluster")
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, m := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
	}
	return out
}
