// Package virtpodmachinetemplate keeps each VirtPodMachineTemplate's status.capacity and
// status.nodeInfo, which the cluster autoscaler reads to scale a MachineDeployment up from zero.
package virtpodmachinetemplate

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
)

// Reconciler writes a template's status from its spec.
type Reconciler struct {
	Client client.Client
}

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=virtpodmachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=virtpodmachinetemplates/status,verbs=patch

// Reconcile patches the status when it differs from what the spec earns; a template's machine
// spec cannot change, so that is once per template (and again after someone edits the status).
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	t := &infrav1.VirtPodMachineTemplate{}
	if err := r.Client.Get(ctx, req.NamespacedName, t); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	want := infrav1.TemplateStatus(t.Spec)
	if equality.Semantic.DeepEqual(t.Status, want) {
		return reconcile.Result{}, nil
	}
	next := t.DeepCopy()
	next.Status = want
	return reconcile.Result{}, r.Client.Status().Patch(ctx, next, client.MergeFromWithOptions(t, client.MergeFromWithOptimisticLock{}))
}

// SetupWithManager registers the controller. Templates change rarely and a reconcile that finds
// the status right writes nothing, so every event of theirs may wake it.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, skipNameValidation bool) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("virtpodmachinetemplate").
		For(&infrav1.VirtPodMachineTemplate{}).
		WithOptions(controller.Options{SkipNameValidation: &skipNameValidation}).
		Complete(r)
}
