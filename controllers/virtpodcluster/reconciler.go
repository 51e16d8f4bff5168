// Package virtpodcluster is the VirtPodCluster controller, the infrastructure-cluster half of
// virtpod's Cluster API provider: it fronts the control-plane VMs with a Service and publishes
// the control-plane endpoint, or steps aside when another controller (Kamaji) runs the control
// plane, and tells Cluster API when the infrastructure is provisioned.
package virtpodcluster

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	"github.com/virtpod/virtpod/controllers/clusterapi"
	"github.com/virtpod/virtpod/pkg/controlplaneservice"
)

// ZoneLabel is the node label failure domains are read from.
const ZoneLabel = corev1.LabelTopologyZone

// Reasons a user sees on the conditions.
const (
	ReasonServiceReady        = "ServiceReady"
	ReasonServiceNotReady     = "ServiceNotReady"
	ReasonExternallyManaged   = "ExternallyManaged"
	ReasonEndpointFromService = "EndpointFromService"
	ReasonEndpointSetByUser   = "EndpointSetExternally"
	ReasonWaitingForEndpoint  = "WaitingForExternalEndpoint"
	ReasonProvisioned         = "Provisioned"
)

// Reconciler reconciles VirtPodClusters.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
}

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=virtpodclusters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=virtpodclusters/status,verbs=patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=virtpodclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// Reconcile runs the steps for one VirtPodCluster.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vc := &infrav1.VirtPodCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, vc); err != nil || vc.DeletionTimestamp != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err) // the Service goes with its owner
	}
	cluster, err := clusterapi.OwnerCluster(ctx, r.Client, vc)
	if err != nil {
		return reconcile.Result{}, err
	}
	next := vc.DeepCopy()
	setCondition(next, clusterapi.PausedCondition(cluster, vc))
	switch {
	case cluster == nil:
		waiting(next, clusterapi.ReasonWaitingOwner, "waiting for Cluster API to make a Cluster the owner of this VirtPodCluster")
	case clusterapi.Paused(cluster, vc):
		// Nothing changes while paused; the Paused condition says so.
	default:
		if err := r.steps(ctx, vc, next, cluster); apierrors.IsConflict(err) {
			return reconcile.Result{}, nil // we read a stale object; the newer one's event brings us back
		} else if err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, r.patchStatus(ctx, vc, next)
}

// steps: Service (unless managed by someone else), endpoint, failure domains, provisioned.
func (r *Reconciler) steps(ctx context.Context, vc, next *infrav1.VirtPodCluster, cluster *clusterv1.Cluster) error {
	offered, why, err := r.service(ctx, vc, next, cluster)
	if err != nil {
		return err
	}
	if err := r.endpoint(ctx, vc, next, offered, why); err != nil {
		return err
	}
	fds, err := r.failureDomains(ctx, vc)
	if err != nil {
		return err
	}
	next.Status.FailureDomains = fds
	provisioned(next)
	return nil
}

// service keeps the control-plane Service as the template says and returns the endpoint it
// offers (zero with the reason while it offers none). A managed cluster gets no Service; one
// made before the annotation appeared is left as it was, and goes with the VirtPodCluster.
func (r *Reconciler) service(ctx context.Context, vc, next *infrav1.VirtPodCluster, cluster *clusterv1.Cluster) (clusterv1.APIEndpoint, string, error) {
	if by, ok := vc.Annotations[infrav1.ManagedByAnnotation]; ok {
		setCondition(next, metav1.Condition{Type: infrav1.ControlPlaneServiceReadyCondition, Status: metav1.ConditionTrue,
			Reason: ReasonExternallyManaged, Message: fmt.Sprintf("%s=%q: that controller runs the control plane; virtpod creates no Service", infrav1.ManagedByAnnotation, by)})
		return clusterv1.APIEndpoint{}, "", nil
	}
	created, err := r.applyService(ctx, vc, cluster)
	if err != nil {
		msg := fmt.Sprintf("cannot apply Service %s: %v", controlplaneservice.Name(vc.Name), err)
		setCondition(next, metav1.Condition{Type: infrav1.ControlPlaneServiceReadyCondition, Status: metav1.ConditionFalse,
			Reason: ReasonServiceNotReady, Message: msg})
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, ReasonServiceNotReady, "ApplyService", "%s", msg)
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return clusterv1.APIEndpoint{}, msg, nil // retrying will not help; a spec change will
		}
		return clusterv1.APIEndpoint{}, "", err
	}
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: vc.Namespace, Name: controlplaneservice.Name(vc.Name)}, svc); err != nil {
		return clusterv1.APIEndpoint{}, "", client.IgnoreNotFound(err) // the cache catches up and its event brings us back
	}
	if created {
		r.Recorder.Eventf(vc, svc, corev1.EventTypeNormal, "ServiceCreated", "ApplyService", "control-plane Service %s selects the control-plane VMs of Cluster %s", svc.Name, cluster.Name)
	}
	next.Status.ControlPlaneServiceName = svc.Name
	offered, why := controlplaneservice.Endpoint(svc)
	cond := metav1.Condition{Type: infrav1.ControlPlaneServiceReadyCondition, Status: metav1.ConditionTrue, Reason: ReasonServiceReady,
		Message: fmt.Sprintf("Service %s (%s) selects the control-plane VMs of Cluster %s on port %d", svc.Name, svc.Spec.Type, cluster.Name, controlplaneservice.Port)}
	if why != "" {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonServiceNotReady, why
	}
	setCondition(next, cond)
	return offered, why, nil
}

// applyService applies the Service and says whether it created it; one that is missing is re-created at the published cluster
// IP, or at a new one when that IP cannot be had.
func (r *Reconciler) applyService(ctx context.Context, vc *infrav1.VirtPodCluster, cluster *clusterv1.Cluster) (created bool, err error) {
	name := controlplaneservice.Name(vc.Name)
	pin := ""
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: vc.Namespace, Name: name}, &corev1.Service{})
	missing := apierrors.IsNotFound(err)
	if err != nil && !missing {
		return false, err
	}
	if missing {
		pin = controlplaneservice.PublishedClusterIP(vc)
	}
	apply := controlplaneservice.Build(vc, cluster.Name, pin)
	err = r.Client.Apply(ctx, apply, client.FieldOwner(clusterapi.FieldOwner), client.ForceOwnership)
	if pin != "" && apierrors.IsInvalid(err) {
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, "ClusterIPLost", "ApplyService", "cannot re-create Service %s at %s (%v); it gets a new address", name, pin, err)
		apply = controlplaneservice.Build(vc, cluster.Name, "")
		err = r.Client.Apply(ctx, apply, client.FieldOwner(clusterapi.FieldOwner), client.ForceOwnership)
	}
	return missing && err == nil, err
}

// endpoint writes the Service's endpoint into spec.controlPlaneEndpoint when the field is empty
// or holds what virtpod wrote before, and never otherwise.
func (r *Reconciler) endpoint(ctx context.Context, vc, next *infrav1.VirtPodCluster, offered clusterv1.APIEndpoint, why string) error {
	have := vc.Spec.ControlPlaneEndpoint
	_, managed := vc.Annotations[infrav1.ManagedByAnnotation]
	ours := !have.IsZero() && have == vc.Status.ServiceEndpoint
	cond := metav1.Condition{Type: infrav1.ControlPlaneEndpointReadyCondition}
	switch {
	case !managed && offered.IsValid() && (have.IsZero() || ours) && have != offered:
		patched := vc.DeepCopy()
		patched.Spec.ControlPlaneEndpoint = offered
		if err := r.Client.Patch(ctx, patched, client.MergeFromWithOptions(vc, client.MergeFromWithOptimisticLock{})); err != nil {
			return err // a conflict is retried at once, on the newer object
		}
		next.ObjectMeta, next.Spec = patched.ObjectMeta, patched.Spec
		next.Status.ServiceEndpoint = offered
		r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "EndpointSet", "SetEndpoint", "spec.controlPlaneEndpoint set to %s from Service %s", offered, next.Status.ControlPlaneServiceName)
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, ReasonEndpointFromService, "spec.controlPlaneEndpoint is "+offered.String()+", from Service "+next.Status.ControlPlaneServiceName
	case have.IsValid() && (ours || have == offered) && !managed:
		next.Status.ServiceEndpoint = have
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, ReasonEndpointFromService, "spec.controlPlaneEndpoint is "+have.String()+", from Service "+next.Status.ControlPlaneServiceName
	case have.IsValid():
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, ReasonEndpointSetByUser, "spec.controlPlaneEndpoint "+have.String()+" was set by someone else; virtpod leaves it as it is"
	case managed:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonWaitingForEndpoint,
			fmt.Sprintf("waiting for %s to set spec.controlPlaneEndpoint (the cluster carries %s)", vc.Annotations[infrav1.ManagedByAnnotation], infrav1.ManagedByAnnotation)
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonServiceNotReady, why
		if have.Host != "" || have.Port != 0 {
			cond.Message = "spec.controlPlaneEndpoint needs both host and port (port 1-65535); set the missing one or clear the field to let virtpod fill it"
		}
	}
	cond.ObservedGeneration = next.Generation
	setCondition(next, cond)
	return nil
}

// failureDomains are the explicit list, or else every zone found on the nodes.
func (r *Reconciler) failureDomains(ctx context.Context, vc *infrav1.VirtPodCluster) ([]clusterv1.FailureDomain, error) {
	var out []clusterv1.FailureDomain
	if len(vc.Spec.FailureDomains) > 0 {
		for _, fd := range vc.Spec.FailureDomains {
			cp := fd.ControlPlane == nil || *fd.ControlPlane
			out = append(out, clusterv1.FailureDomain{Name: fd.Name, ControlPlane: &cp})
		}
		return out, nil
	}
	nodes := &metav1.PartialObjectMetadataList{}
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := r.Client.List(ctx, nodes, client.HasLabels{ZoneLabel}); err != nil {
		return nil, fmt.Errorf("listing nodes for their zones: %w", err)
	}
	var zones []string
	for _, n := range nodes.Items {
		if z := n.Labels[ZoneLabel]; z != "" && !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	slices.Sort(zones)
	for _, z := range zones {
		cp := true
		out = append(out, clusterv1.FailureDomain{Name: z, ControlPlane: &cp})
	}
	return out, nil
}

// provisioned tells Cluster API the infrastructure is ready once a valid endpoint is present.
// It stays true: the contract has no way back, and Cluster API has acted on it.
func provisioned(next *infrav1.VirtPodCluster) {
	ep := next.Spec.ControlPlaneEndpoint
	done := clusterapi.Provisioned(next.Status.Initialization.Provisioned) || ep.IsValid()
	next.Status.Initialization.Provisioned, next.Status.Ready = &done, done
	cond := metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: ReasonProvisioned,
		Message: "infrastructure provisioned; control-plane endpoint " + ep.String()}
	if !done {
		ec := meta.FindStatusCondition(next.Status.Conditions, infrav1.ControlPlaneEndpointReadyCondition)
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ec.Reason, ec.Message
	}
	setCondition(next, cond)
}

func waiting(next *infrav1.VirtPodCluster, reason, msg string) {
	setCondition(next, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
}

func setCondition(vc *infrav1.VirtPodCluster, c metav1.Condition) {
	c.ObservedGeneration = vc.Generation
	meta.SetStatusCondition(&vc.Status.Conditions, c)
}

// patchStatus writes the status when it changed.
func (r *Reconciler) patchStatus(ctx context.Context, vc, next *infrav1.VirtPodCluster) error {
	next.Status.ObservedGeneration = next.Generation
	if equality.Semantic.DeepEqual(vc.Status, next.Status) {
		return nil
	}
	return clusterapi.PatchStatus(ctx, r.Client, vc, next)
}
