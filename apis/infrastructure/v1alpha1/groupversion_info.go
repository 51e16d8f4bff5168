// Package v1alpha1 is virtpod's Cluster API infrastructure provider API,
// infrastructure.cluster.x-k8s.io/v1alpha1: VirtPodCluster, VirtPodMachine and their templates.
// It implements the Cluster API contract v1beta2, declared to Cluster API by the
// `cluster.x-k8s.io/v1beta2: v1alpha1` label on every CRD.
// +kubebuilder:object:generate=true
// +groupName=infrastructure.cluster.x-k8s.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha1"}
	// SchemeBuilder registers the API's types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds the API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Annotations and labels of the Cluster API contract that virtpod reads.
const (
	// ManagedByAnnotation on a VirtPodCluster means another controller (Kamaji, for example)
	// runs the control plane and sets spec.controlPlaneEndpoint; its presence is what counts.
	ManagedByAnnotation = "cluster.x-k8s.io/managed-by"
	// PausedAnnotation on a VirtPodCluster or VirtPodMachine stops virtpod reconciling it.
	PausedAnnotation = "cluster.x-k8s.io/paused"
	// ClusterNameLabel names the Cluster API Cluster an object belongs to.
	ClusterNameLabel = "cluster.x-k8s.io/cluster-name"
	// ControlPlaneLabel marks a Machine (and its VirtPodMachine, VM and pod) as control plane.
	ControlPlaneLabel = "cluster.x-k8s.io/control-plane"
	// BlockMoveAnnotation, clusterctl's, holds `clusterctl move` back while an object carries
	// it. virtpod keeps it on every VirtPodCluster: the VMs and the control-plane Service live
	// on this management cluster, and a move would delete them (docs/capi.md).
	BlockMoveAnnotation = "clusterctl.cluster.x-k8s.io/block-move"
	// BlockMoveReason is the annotation's value: clusterctl logs only the key, kubectl shows
	// the value.
	BlockMoveReason = "virtpod VMs run on this management cluster; a move would delete them (docs/capi.md)"
)
