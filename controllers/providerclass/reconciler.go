package providerclass

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/statuspatch"
)

// Reconciler keeps ProviderClass status.
type Reconciler struct {
	Client client.Client
	Now    func() time.Time
}

// +kubebuilder:rbac:groups=vm.virtpod.io,resources=providerclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=vm.virtpod.io,resources=providerclasses/status,verbs=patch
// +kubebuilder:rbac:groups=vm.virtpod.io,resources=hypervisornodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// Reconcile computes one class's status from the node reports.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	class := &vmv1.ProviderClass{}
	if err := r.Client.Get(ctx, req.NamespacedName, class); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	hvs := &vmv1.HypervisorNodeList{}
	if err := r.Client.List(ctx, hvs); err != nil {
		return reconcile.Result{}, err
	}
	nodes, err := r.nodes(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	classes := &vmv1.ProviderClassList{}
	if err := r.Client.List(ctx, classes); err != nil {
		return reconcile.Result{}, err
	}
	now := r.now()
	fit := Evaluate(class, "", hvs.Items, nodes, now)
	next := class.DeepCopy()
	setStatus(&next.Status, class, fit)
	next.Status.Default = soleDefault(classes.Items) == class.Name
	if err := statuspatch.Patch(ctx, r.Client, class, next); apierrors.IsConflict(err) {
		return reconcile.Result{}, nil // a newer class is on its way
	} else if err != nil {
		return reconcile.Result{}, err
	}
	// A report goes stale without any event: come back when the freshest ready node's would.
	return reconcile.Result{RequeueAfter: untilStale(hvs.Items, now)}, nil
}

func setStatus(st *vmv1.ProviderClassStatus, class *vmv1.ProviderClass, fit Fit) {
	st.ReadyNodes, st.TotalNodes, st.Versions = int32(fit.Ready), int32(fit.Total), fit.Versions
	st.ObservedGeneration = class.Generation
	enabled := metav1.Condition{Type: vmv1.ConditionEnabled, Status: metav1.ConditionTrue, Reason: vmv1.ReasonEnabled,
		Message: "new VMs of this class may start", ObservedGeneration: class.Generation}
	avail := metav1.Condition{Type: vmv1.ConditionAvailable, Status: metav1.ConditionTrue, Reason: vmv1.ReasonNodesReady,
		Message: fit.Summary(), ObservedGeneration: class.Generation}
	if class.Spec.Enabled != nil && !*class.Spec.Enabled {
		enabled.Status, enabled.Reason = metav1.ConditionFalse, vmv1.ReasonDisabledByAdmin
		enabled.Message = "disabled by an admin"
		if class.Spec.DisabledReason != "" {
			enabled.Message += ": " + class.Spec.DisabledReason
		}
		avail.Status, avail.Reason, avail.Message = metav1.ConditionFalse, vmv1.ReasonDisabledByAdmin, enabled.Message+"; "+fit.Summary()
	} else if fit.Total == 0 {
		avail.Status, avail.Reason = metav1.ConditionFalse, vmv1.ReasonNoNodes
	} else if fit.Ready == 0 {
		avail.Status, avail.Reason = metav1.ConditionFalse, vmv1.ReasonNoReadyNodes
	}
	meta.SetStatusCondition(&st.Conditions, enabled)
	meta.SetStatusCondition(&st.Conditions, avail)
}

// soleDefault is the one class annotated as the default, or "" when none or several are: a VM
// then gets no provider rather than one picked among rivals.
func soleDefault(classes []vmv1.ProviderClass) string {
	name := ""
	for _, c := range classes {
		if c.Annotations[vmv1.AnnotationDefaultClass] == "true" {
			if name != "" {
				return ""
			}
			name = c.Name
		}
	}
	return name
}

func untilStale(hvs []vmv1.HypervisorNode, now time.Time) time.Duration {
	var next time.Duration
	for _, hv := range hvs {
		left := hv.Status.HeartbeatTime.Add(vmv1.ReportStaleAfter).Sub(now)
		if left > 0 && (next == 0 || left < next) {
			next = left + time.Second
		}
	}
	return next
}

func (r *Reconciler) nodes(ctx context.Context) (map[string]*corev1.Node, error) {
	list := &corev1.NodeList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil, err
	}
	m := make(map[string]*corev1.Node, len(list.Items))
	for i := range list.Items {
		m[list.Items[i].Name] = &list.Items[i]
	}
	return m, nil
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// SetupWithManager: classes (all of them when one's annotations change), node reports and nodes drive it — nodes only when their labels
// change (class selectors match labels), not on every kubelet status update.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, skipNameValidation bool) error {
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		list := &vmv1.ProviderClassList{}
		if err := r.Client.List(ctx, list); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, len(list.Items))
		for i := range list.Items {
			reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
		}
		return reqs
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("providerclass").
		For(&vmv1.ProviderClass{}).
		// One class's default annotation decides every class's status.default.
		Watches(&vmv1.ProviderClass{}, all, builder.WithPredicates(predicate.AnnotationChangedPredicate{})).
		Watches(&vmv1.HypervisorNode{}, all).
		Watches(&corev1.Node{}, all, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WithOptions(controller.Options{SkipNameValidation: &skipNameValidation}).
		Complete(r)
}
