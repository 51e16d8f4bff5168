package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// VirtPodClusterSpec is the infrastructure of one Cluster API cluster.
type VirtPodClusterSpec struct {
	// controlPlaneEndpoint is where the workload cluster's API server is reached. virtpod sets it
	// from its control-plane Service when it is empty, and never overwrites an endpoint someone
	// else set. With the cluster.x-k8s.io/managed-by annotation virtpod never touches it: the
	// managing controller (Kamaji) sets it.
	// +optional
	ControlPlaneEndpoint clusterv1.APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`

	// controlPlaneService shapes the Service virtpod creates in front of the control-plane
	// machines' runner pods. Ignored while the cluster carries cluster.x-k8s.io/managed-by.
	// +optional
	ControlPlaneService ControlPlaneService `json:"controlPlaneService,omitempty,omitzero"`

	// failureDomains lists the zones (values of the nodes' topology.kubernetes.io/zone label)
	// machines may be spread over. Empty means every zone found on the nodes.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []FailureDomain `json:"failureDomains,omitempty"`
}

// ControlPlaneService is the template of the control-plane Service.
type ControlPlaneService struct {
	// type of the Service: ClusterIP (default), NodePort or LoadBalancer. The endpoint is the
	// load balancer's ingress for LoadBalancer, the cluster IP otherwise.
	// +optional
	// +kubebuilder:default=ClusterIP
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	Type corev1.ServiceType `json:"type,omitempty"`

	// labels added to the Service.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations added to the Service (for example a cloud's load-balancer settings).
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// FailureDomain is one zone machines can be placed in.
type FailureDomain struct {
	// name is the zone: the value of topology.kubernetes.io/zone on the nodes of this domain.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// controlPlane says whether control-plane machines may be placed in this domain.
	// +optional
	// +kubebuilder:default=true
	ControlPlane *bool `json:"controlPlane,omitempty"`
}

// VirtPodClusterStatus is what virtpod observed and did.
type VirtPodClusterStatus struct {
	// initialization.provisioned tells Cluster API the infrastructure is ready: a valid
	// spec.controlPlaneEndpoint is present.
	// +optional
	Initialization ClusterInitialization `json:"initialization,omitempty,omitzero"`

	// ready mirrors initialization.provisioned for tooling of the v1beta1 contract.
	// +optional
	Ready bool `json:"ready,omitempty"`

	// failureDomains machines can be placed in.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []clusterv1.FailureDomain `json:"failureDomains,omitempty"`

	// controlPlaneServiceName is the Service virtpod created, if any.
	// +optional
	ControlPlaneServiceName string `json:"controlPlaneServiceName,omitempty"`

	// serviceEndpoint is the endpoint virtpod last wrote into spec.controlPlaneEndpoint. An
	// endpoint that differs from it was set by someone else and is left alone.
	// +optional
	ServiceEndpoint clusterv1.APIEndpoint `json:"serviceEndpoint,omitempty,omitzero"`

	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, ControlPlaneServiceReady, ControlPlaneEndpointReady, Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClusterInitialization is the v1beta2 contract's initialization status of an infra cluster.
type ClusterInitialization struct {
	// provisioned is true once the infrastructure is ready for the control plane.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// VirtPodCluster is the infrastructure of a Cluster API cluster whose machines are virtpod VMs.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=cluster-api,shortName=vpc
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.metadata.labels['cluster\.x-k8s\.io/cluster-name']`
// +kubebuilder:printcolumn:name="Provisioned",type=boolean,JSONPath=`.status.initialization.provisioned`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.controlPlaneEndpoint.host`
// +kubebuilder:printcolumn:name="Managed-By",type=string,JSONPath=`.metadata.annotations['cluster\.x-k8s\.io/managed-by']`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VirtPodCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VirtPodClusterSpec   `json:"spec,omitempty"`
	Status VirtPodClusterStatus `json:"status,omitempty"`
}

// VirtPodClusterList is a list of VirtPodClusters.
// +kubebuilder:object:root=true
type VirtPodClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtPodCluster `json:"items"`
}

// VirtPodClusterTemplateSpec holds the template ClusterClass stamps VirtPodClusters from.
type VirtPodClusterTemplateSpec struct {
	Template VirtPodClusterTemplateResource `json:"template"`
}

// VirtPodClusterTemplateResource is the stamped object: metadata and spec.
type VirtPodClusterTemplateResource struct {
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	Spec       VirtPodClusterSpec   `json:"spec"`
}

// VirtPodClusterTemplate is a template for VirtPodClusters (ClusterClass).
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
type VirtPodClusterTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VirtPodClusterTemplateSpec `json:"spec,omitempty"`
}

// VirtPodClusterTemplateList is a list of VirtPodClusterTemplates.
// +kubebuilder:object:root=true
type VirtPodClusterTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtPodClusterTemplate `json:"items"`
}

func init() {
	SchemeBuilder.Register(&VirtPodCluster{}, &VirtPodClusterList{},
		&VirtPodClusterTemplate{}, &VirtPodClusterTemplateList{})
}
