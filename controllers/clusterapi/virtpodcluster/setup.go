package virtpodcluster

import (
	"context"

	corev1 "k8s.io/api/core/v1"
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
	"github.com/virtpod/virtpod/controllers/clusterapi"
)

// SetupWithManager registers the controller: VirtPodClusters, the Services they own, their
// Clusters (owner, pause) and the nodes' zone labels drive it; nothing polls.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, skipNameValidation bool) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("virtpodcluster").
		For(&infrav1.VirtPodCluster{}).
		Owns(&corev1.Service{}).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(infraCluster),
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.discoveringClusters),
			builder.OnlyMetadata, builder.WithPredicates(zoneChanged)).
		WithOptions(controller.Options{SkipNameValidation: &skipNameValidation}).
		Complete(r)
}

// infraCluster maps a Cluster to the VirtPodCluster it references.
func infraCluster(_ context.Context, o client.Object) []reconcile.Request {
	c := o.(*clusterv1.Cluster)
	return clusterapi.InfraRequest(c.Namespace, c.Spec.InfrastructureRef, "VirtPodCluster")
}

// zoneChanged passes node events that can change the set of zones.
var zoneChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetLabels()[ZoneLabel] != e.ObjectNew.GetLabels()[ZoneLabel]
	},
	CreateFunc:  func(e event.CreateEvent) bool { return e.Object.GetLabels()[ZoneLabel] != "" },
	DeleteFunc:  func(e event.DeleteEvent) bool { return e.Object.GetLabels()[ZoneLabel] != "" },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// discoveringClusters are the VirtPodClusters that take their failure domains from the nodes.
func (r *Reconciler) discoveringClusters(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &infrav1.VirtPodClusterList{}
	if err := r.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing VirtPodClusters for a node's zone change")
		return nil
	}
	var out []reconcile.Request
	for _, vc := range list.Items {
		if len(vc.Spec.FailureDomains) == 0 {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&vc)})
		}
	}
	return out
}
