// Package virtpodcluster is the VirtPodCluster controller, the infrastructure-cluster half of
// virtpod's Cluster API provider: it fronts the control-plane VMs with a Service and publishes
// the control-plane endpoint, or steps aside when another controller (Kamaji) runs the control
// plane, and tells Cluster API when the infrastructure is provisioned.
package virtpodcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	"github.com/virtpod/virtpod/controllers/clusterapi"
	"github.com/virtpod/virtpod/controllers/statuspatch"
	"github.com/virtpod/virtpod/pkg/clusterapi/controlplaneservice"
)

// ZoneLabel is the node label failure domains are read from.
const ZoneLabel = corev1.LabelTopologyZone

// Reconciler reconciles VirtPodClusters.
type Reconciler struct {
	Client client.Client
	// APIReader reads past the cache, which holds only virtpod's Services.
	APIReader client.Reader
	Recorder  events.EventRecorder
}

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=virtpodclusters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=virtpodclusters/status,verbs=patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=virtpodclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ipaddresses,verbs=get

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
	// Before anything else, and paused or not: clusterctl pauses a Cluster before it looks for
	// the annotation.
	if err := r.blockMove(ctx, vc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	next := vc.DeepCopy()
	setCondition(next, clusterapi.PausedCondition(cluster, vc))
	switch {
	case cluster == nil:
		waiting(next, infrav1.ReasonWaitingForOwner, "waiting for Cluster API to make a Cluster the owner of this VirtPodCluster")
	case clusterapi.Paused(cluster, vc):
		// Nothing changes while paused; the Paused condition says so.
	default:
		if err := r.steps(ctx, vc, next, cluster); errors.Is(err, errServiceNameTaken) {
			return reconcile.Result{}, errors.Join(err, r.patchStatus(ctx, vc, next)) // retried with back-off: that Service's events do not reach us
		} else if apierrors.IsConflict(err) {
			return reconcile.Result{}, nil // we read a stale object; the newer one's event brings us back
		} else if err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, r.patchStatus(ctx, vc, next)
}

// steps: Service (unless managed by someone else), endpoint, failure domains, provisioned.
// A Service of someone else's under the control-plane name is reported, after the other steps.
func (r *Reconciler) steps(ctx context.Context, vc, next *infrav1.VirtPodCluster, cluster *clusterv1.Cluster) error {
	offered, taken := r.service(ctx, vc, next, cluster)
	if taken != nil && !errors.Is(taken, errServiceNameTaken) {
		return taken
	}
	if err := r.endpoint(ctx, vc, next, cluster, offered); err != nil {
		return err
	}
	fds, err := r.failureDomains(ctx, vc)
	if err != nil {
		return err
	}
	next.Status.FailureDomains = fds
	provisioned(next)
	return taken
}

// offer is the endpoint the control-plane Service offers, or why it offers none (reason and
// message of ControlPlaneServiceReady=False).
type offer struct {
	endpoint    clusterv1.APIEndpoint
	reason, why string
}

var errServiceNameTaken = errors.New("control-plane Service name taken")

// service keeps the control-plane Service as the template says and returns the endpoint it
// offers. A managed cluster gets no Service; one made before the annotation appeared is left as
// it was, and goes with the VirtPodCluster. A Service of someone else's under the name is never
// taken over.
func (r *Reconciler) service(ctx context.Context, vc, next *infrav1.VirtPodCluster, cluster *clusterv1.Cluster) (offer, error) {
	if by, ok := vc.Annotations[infrav1.ManagedByAnnotation]; ok {
		setCondition(next, metav1.Condition{Type: infrav1.ControlPlaneServiceReadyCondition, Status: metav1.ConditionTrue,
			Reason: infrav1.ReasonExternallyManaged, Message: fmt.Sprintf("%s=%q: that controller runs the control plane; virtpod creates no Service", infrav1.ManagedByAnnotation, by)})
		return offer{}, nil
	}
	existing, err := r.existingService(ctx, vc)
	if err != nil {
		return offer{}, err
	}
	if existing != nil && !metav1.IsControlledBy(existing, vc) {
		return r.nameTaken(vc, next, existing)
	}
	created, err := r.applyService(ctx, vc, cluster, existing)
	if errors.Is(err, errClusterIPReleasing) {
		return offer{}, err // a moment's wait, not news: no condition change, no event
	}
	if err != nil {
		msg := fmt.Sprintf("cannot apply Service %s: %v", controlplaneservice.Name(vc.Name), err)
		setCondition(next, metav1.Condition{Type: infrav1.ControlPlaneServiceReadyCondition, Status: metav1.ConditionFalse,
			Reason: infrav1.ReasonServiceNotReady, Message: msg})
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, infrav1.ReasonServiceNotReady, "ApplyService", "%s", msg)
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return offer{reason: infrav1.ReasonServiceNotReady, why: msg}, nil // retrying will not help; a spec change will
		}
		return offer{}, err
	}
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: vc.Namespace, Name: controlplaneservice.Name(vc.Name)}, svc); err != nil {
		return offer{}, client.IgnoreNotFound(err) // the cache catches up and its event brings us back
	}
	if created {
		r.Recorder.Eventf(vc, svc, corev1.EventTypeNormal, "ServiceCreated", "ApplyService", "control-plane Service %s selects the control-plane VMs of Cluster %s", svc.Name, cluster.Name)
	}
	next.Status.ControlPlaneServiceName = svc.Name
	offered, why := controlplaneservice.Endpoint(svc)
	cond := metav1.Condition{Type: infrav1.ControlPlaneServiceReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReasonServiceReady,
		Message: fmt.Sprintf("Service %s (%s) selects the control-plane VMs of Cluster %s on port %d", svc.Name, svc.Spec.Type, cluster.Name, controlplaneservice.Port)}
	if why != "" {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, infrav1.ReasonServiceNotReady, why
	}
	setCondition(next, cond)
	return offer{endpoint: offered, reason: cond.Reason, why: why}, nil
}

// existingService is the Service under the control-plane name, nil when there is none. The
// cache holds only Services labelled as virtpod's, so a miss is asked of the API server:
// someone else's Service would be there without that label.
func (r *Reconciler) existingService(ctx context.Context, vc *infrav1.VirtPodCluster) (*corev1.Service, error) {
	key := client.ObjectKey{Namespace: vc.Namespace, Name: controlplaneservice.Name(vc.Name)}
	svc := &corev1.Service{}
	err := r.Client.Get(ctx, key, svc)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, svc)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return svc, nil
}

// nameTaken refuses a Service of someone else's under the control-plane name, as the VM
// controller refuses a pod under a runner pod's name: applying with force would take over its
// selector and ports. The error makes the queue retry with back-off until it is gone, since that
// Service's events do not reach this controller.
func (r *Reconciler) nameTaken(vc, next *infrav1.VirtPodCluster, svc *corev1.Service) (offer, error) {
	msg := fmt.Sprintf("Service %s exists and is not controlled by this VirtPodCluster, so virtpod neither changes nor uses it; "+
		"delete or rename that Service and virtpod creates its own (or, if another controller runs the control plane, annotate this VirtPodCluster with %s)",
		svc.Name, infrav1.ManagedByAnnotation)
	if old := meta.FindStatusCondition(vc.Status.Conditions, infrav1.ControlPlaneServiceReadyCondition); old == nil || old.Reason != infrav1.ReasonServiceNameTaken || old.Message != msg {
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, infrav1.ReasonServiceNameTaken, "ApplyService", "%s", msg)
	}
	setCondition(next, metav1.Condition{Type: infrav1.ControlPlaneServiceReadyCondition, Status: metav1.ConditionFalse,
		Reason: infrav1.ReasonServiceNameTaken, Message: msg})
	return offer{reason: infrav1.ReasonServiceNameTaken, why: msg}, fmt.Errorf("%w: Service %s/%s", errServiceNameTaken, svc.Namespace, svc.Name)
}

// applyService applies the Service and says whether it created it. The apply always names the
// cluster IP the Service has or, when it is missing, the published one: the cache can still hold a
// Service deleted a moment ago, and an apply without the IP would re-create it at a new address
// and move the endpoint Cluster API copied into the Cluster. Only an IP held by another Service
// gives way to a new address.
func (r *Reconciler) applyService(ctx context.Context, vc *infrav1.VirtPodCluster, cluster *clusterv1.Cluster, existing *corev1.Service) (created bool, err error) {
	name := controlplaneservice.Name(vc.Name)
	pin := controlplaneservice.PublishedClusterIP(vc)
	if existing != nil {
		pin = ""
		if net.ParseIP(existing.Spec.ClusterIP) != nil {
			pin = existing.Spec.ClusterIP
		}
	}
	apply := controlplaneservice.Build(vc, cluster.Name, pin)
	err = r.Client.Apply(ctx, apply, client.FieldOwner(clusterapi.FieldOwner), client.ForceOwnership)
	if pin != "" && clusterIPTaken(err) {
		if r.releasing(ctx, vc.Namespace, name, pin) {
			return false, fmt.Errorf("%w: %s is still held by the deleted Service %s", errClusterIPReleasing, pin, name)
		}
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, "ClusterIPLost", "ApplyService", "cannot re-create Service %s at %s (%v); it gets a new address", name, pin, err)
		apply = controlplaneservice.Build(vc, cluster.Name, "")
		err = r.Client.Apply(ctx, apply, client.FieldOwner(clusterapi.FieldOwner), client.ForceOwnership)
	}
	return existing == nil && err == nil, err
}

// clusterIPTaken says whether the API server refused the Service for its cluster IP, and not
// for something in the template, which a new address would not mend.
func clusterIPTaken(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Field == "spec.clusterIPs" || c.Field == "spec.clusterIP" {
			return true
		}
	}
	return false
}

var errClusterIPReleasing = errors.New("published cluster IP not yet released")

// releasing says whether the cluster IP is still held by the deleted Service of this name: the
// API server frees a Service's IP (its IPAddress object) only after the delete has been seen by
// watchers, so a re-create at once can find it taken by its own predecessor. That retries with
// back-off; an IP held by any other Service is lost, and so is one whose holder cannot be read.
func (r *Reconciler) releasing(ctx context.Context, namespace, name, ip string) bool {
	addr := &networkingv1.IPAddress{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Name: ip}, addr)
	if apierrors.IsNotFound(err) {
		return true // freed since the create failed: the retry gets it
	}
	if err != nil || addr.Spec.ParentRef == nil {
		return false
	}
	p := addr.Spec.ParentRef
	return p.Group == "" && p.Resource == "services" && p.Namespace == namespace && p.Name == name
}

// endpoint writes the Service's endpoint into spec.controlPlaneEndpoint when the field is empty
// or holds what virtpod wrote before, and never otherwise.
func (r *Reconciler) endpoint(ctx context.Context, vc, next *infrav1.VirtPodCluster, cluster *clusterv1.Cluster, offered offer) error {
	have, published := vc.Spec.ControlPlaneEndpoint, vc.Status.ServiceEndpoint
	_, managed := vc.Annotations[infrav1.ManagedByAnnotation]
	ours := !have.IsZero() && have == published
	cond := metav1.Condition{Type: infrav1.ControlPlaneEndpointReadyCondition}
	switch ep := offered.endpoint; {
	case !managed && ep.IsValid() && (have.IsZero() || ours) && have != ep:
		patched := vc.DeepCopy()
		patched.Spec.ControlPlaneEndpoint = ep
		if err := r.Client.Patch(ctx, patched, client.MergeFromWithOptions(vc, client.MergeFromWithOptimisticLock{})); err != nil {
			return err // a conflict is retried at once, on the newer object
		}
		next.ObjectMeta, next.Spec = patched.ObjectMeta, patched.Spec
		next.Status.ServiceEndpoint = ep
		r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "EndpointSet", "SetEndpoint", "spec.controlPlaneEndpoint set to %s from Service %s", ep, next.Status.ControlPlaneServiceName)
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, infrav1.ReasonEndpointFromService, "spec.controlPlaneEndpoint is "+ep.String()+", from Service "+next.Status.ControlPlaneServiceName
	case have.IsValid() && (ours || have == ep) && !managed:
		next.Status.ServiceEndpoint = have
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, infrav1.ReasonEndpointFromService, "spec.controlPlaneEndpoint is "+have.String()+", from Service "+next.Status.ControlPlaneServiceName
	case have.IsValid() && !managed && published.IsValid():
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, infrav1.ReasonEndpointOverwritten, overwritten(vc, cluster)
		if old := meta.FindStatusCondition(vc.Status.Conditions, cond.Type); old == nil || old.Reason != cond.Reason || old.Message != cond.Message {
			r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, cond.Reason, "SetEndpoint", "%s", cond.Message)
		}
	case have.IsValid():
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, infrav1.ReasonEndpointSetExternally, "spec.controlPlaneEndpoint "+have.String()+" was set by someone else; virtpod leaves it as it is"
	case managed:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, infrav1.ReasonWaitingForExternalEndpoint,
			fmt.Sprintf("waiting for %s to set spec.controlPlaneEndpoint (the cluster carries %s)", vc.Annotations[infrav1.ManagedByAnnotation], infrav1.ManagedByAnnotation)
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, infrav1.ReasonServiceNotReady, offered.why
		if offered.reason == infrav1.ReasonServiceNameTaken {
			cond.Reason = offered.reason
		}
		if have.Host != "" || have.Port != 0 {
			cond.Message = "spec.controlPlaneEndpoint needs both host and port (port 1-65535); set the missing one or clear the field to let virtpod fill it"
		}
	}
	cond.ObservedGeneration = next.Generation
	setCondition(next, cond)
	return nil
}

// overwritten explains an endpoint someone else wrote over the one virtpod published from the
// Service it still manages (without the managed-by annotation, Kamaji does so): Cluster API
// copied the first endpoint into the Cluster and fills only an empty one, so the Cluster and
// the VirtPodCluster now disagree, and nodes may join through a Service nobody serves.
func overwritten(vc *infrav1.VirtPodCluster, cluster *clusterv1.Cluster) string {
	have, published := vc.Spec.ControlPlaneEndpoint, vc.Status.ServiceEndpoint
	msg := fmt.Sprintf("spec.controlPlaneEndpoint %s was set by someone else over %s, which virtpod published from Service %s and still manages",
		have, published, vc.Status.ControlPlaneServiceName)
	if cluster.Spec.ControlPlaneEndpoint == published {
		msg += fmt.Sprintf("; Cluster %s keeps %s (Cluster API fills only an empty endpoint), so its nodes would join through virtpod's Service", cluster.Name, published)
	}
	return msg + fmt.Sprintf(". If another controller (such as Kamaji) runs the control plane, the VirtPodCluster needs the annotation %s from its creation: "+
		"then virtpod makes no Service and waits for that controller's endpoint. Otherwise set spec.controlPlaneEndpoint back to %s", infrav1.ManagedByAnnotation, published)
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
	cond := metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReasonProvisioned,
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

// blockMove keeps clusterctl's block-move annotation on vc. `clusterctl move` deletes the moved
// objects in the source cluster, and the garbage collector would then delete every VM and the
// control-plane Service they own, while the target cluster boots new VMs of its own; so a
// VirtPodCluster never moves. A merge patch of that one key, only when it is missing or changed.
func (r *Reconciler) blockMove(ctx context.Context, vc *infrav1.VirtPodCluster) error {
	if vc.Annotations[infrav1.BlockMoveAnnotation] == infrav1.BlockMoveReason {
		return nil
	}
	patched := vc.DeepCopy()
	metav1.SetMetaDataAnnotation(&patched.ObjectMeta, infrav1.BlockMoveAnnotation, infrav1.BlockMoveReason)
	if err := r.Client.Patch(ctx, patched, client.MergeFrom(vc)); err != nil {
		return err
	}
	*vc = *patched
	return nil
}

// patchStatus writes the status when it changed.
func (r *Reconciler) patchStatus(ctx context.Context, vc, next *infrav1.VirtPodCluster) error {
	next.Status.ObservedGeneration = next.Generation
	return statuspatch.IgnoreStale(statuspatch.Patch(ctx, r.Client, vc, next))
}
