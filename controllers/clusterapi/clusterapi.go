// Package clusterapi holds what virtpod's two Cluster API reconcilers share: finding the owning
// Cluster and Machine, and Cluster API's pause rules. Their status is written by
// controllers/statuspatch, like every reconciler's.
package clusterapi

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
)

// FieldOwner is the field manager of everything virtpod's Cluster API controllers write.
const FieldOwner = "virtpod-capi"

// owner returns the name of obj's owner of the given Cluster API kind, or "".
func owner(obj metav1.Object, kind string) string {
	for _, ref := range obj.GetOwnerReferences() {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err == nil && gv.Group == clusterv1.GroupVersion.Group && ref.Kind == kind {
			return ref.Name
		}
	}
	return ""
}

// OwnerCluster returns the Cluster that owns obj (Cluster API sets that reference), or nil
// while there is none yet or it is gone.
func OwnerCluster(ctx context.Context, c client.Reader, obj metav1.Object) (*clusterv1.Cluster, error) {
	name := owner(obj, clusterv1.ClusterKind)
	if name == "" {
		return nil, nil
	}
	return getCluster(ctx, c, obj.GetNamespace(), name)
}

// OwnerMachine returns the Machine that owns obj, or nil while there is none yet or it is gone.
func OwnerMachine(ctx context.Context, c client.Reader, obj metav1.Object) (*clusterv1.Machine, error) {
	name := owner(obj, "Machine")
	if name == "" {
		return nil, nil
	}
	m := &clusterv1.Machine{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}, m); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting Machine %s: %w", name, err)
	}
	return m, nil
}

// MachineCluster returns the Cluster a Machine belongs to, or nil when it does not exist.
func MachineCluster(ctx context.Context, c client.Reader, m *clusterv1.Machine) (*clusterv1.Cluster, error) {
	return getCluster(ctx, c, m.Namespace, m.Spec.ClusterName)
}

func getCluster(ctx context.Context, c client.Reader, namespace, name string) (*clusterv1.Cluster, error) {
	cl := &clusterv1.Cluster{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, cl); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting Cluster %s: %w", name, err)
	}
	return cl, nil
}

// Paused reports whether Cluster API asks providers to leave obj alone: the Cluster is paused
// or obj carries the paused annotation.
func Paused(cluster *clusterv1.Cluster, obj metav1.Object) bool {
	if _, ok := obj.GetAnnotations()[infrav1.PausedAnnotation]; ok {
		return true
	}
	return cluster != nil && cluster.Spec.Paused != nil && *cluster.Spec.Paused
}

// PausedCondition is the v1beta2 contract's Paused condition.
func PausedCondition(cluster *clusterv1.Cluster, obj metav1.Object) metav1.Condition {
	c := metav1.Condition{Type: infrav1.PausedCondition, Status: metav1.ConditionFalse, Reason: infrav1.ReasonNotPaused,
		ObservedGeneration: obj.GetGeneration()}
	if !Paused(cluster, obj) {
		return c
	}
	c.Status, c.Reason = metav1.ConditionTrue, infrav1.ReasonPaused
	if _, ok := obj.GetAnnotations()[infrav1.PausedAnnotation]; ok {
		c.Message = "the " + infrav1.PausedAnnotation + " annotation is set; remove it to resume"
	} else {
		c.Message = "Cluster " + cluster.Name + " has spec.paused: true; unpause the Cluster to resume"
	}
	return c
}

// Provisioned reads a *bool the contract uses for provisioned flags.
func Provisioned(b *bool) bool { return b != nil && *b }

// InfraRequest is the reconcile request for the object ref names, when it is of virtpod's kind.
func InfraRequest(namespace string, ref clusterv1.ContractVersionedObjectReference, kind string) []reconcile.Request {
	if ref.APIGroup != infrav1.GroupVersion.Group || ref.Kind != kind || ref.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: namespace, Name: ref.Name}}}
}
