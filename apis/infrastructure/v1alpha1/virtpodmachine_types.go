package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// ProviderIDPrefix starts every providerID virtpod sets: virtpod://<namespace>/<vm-name>. The
// workload cluster's kubelet must be started with the same --provider-id (docs/capi.md).
const ProviderIDPrefix = "virtpod://"

// VirtPodMachineSpec is one Cluster API machine: a VirtualMachine stamped from a template.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.providerID) || has(self.providerID) && self.providerID == oldSelf.providerID",message="spec.providerID is set once by virtpod and cannot change"
type VirtPodMachineSpec struct {
	// providerID is virtpod://<namespace>/<vm-name>, set by virtpod when it creates the VM.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// virtualMachine is the template of the machine's VirtualMachine. virtpod adds the Cluster
	// API labels, the bootstrap data as a cloud-init seed (by Secret reference) and the failure
	// domain's zone. A machine's VM does not change after creation: roll the MachineDeployment
	// onto a new VirtPodMachineTemplate instead.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.virtualMachine is immutable: roll the MachineDeployment onto a new VirtPodMachineTemplate"
	VirtualMachine VirtualMachineTemplate `json:"virtualMachine"`
}

// VirtualMachineTemplate is a VirtualMachine's metadata and spec.
// +kubebuilder:validation:XValidation:rule="!has(self.spec.guest.cloudInit)",message="spec.virtualMachine.spec.guest.cloudInit is set by virtpod from the Machine's bootstrap data Secret; remove it",fieldPath=".spec.guest.cloudInit"
type VirtualMachineTemplate struct {
	// metadata: labels and annotations put on the VirtualMachine (and its runner pod).
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	// spec of the VirtualMachine.
	Spec vmv1.VirtualMachineSpec `json:"spec"`
}

// VirtPodMachineStatus is what virtpod observed and did.
type VirtPodMachineStatus struct {
	// initialization.provisioned is true once the VM runs; Cluster API then copies providerID
	// and addresses to the Machine.
	// +optional
	Initialization MachineInitialization `json:"initialization,omitempty,omitzero"`

	// ready mirrors initialization.provisioned for tooling of the v1beta1 contract.
	// +optional
	Ready bool `json:"ready,omitempty"`

	// addresses of the VM: its pod IP and its hostname (the VM's name).
	// +optional
	Addresses clusterv1.MachineAddresses `json:"addresses,omitempty"`

	// failureDomain the VM was placed in, when the Machine asked for one.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	FailureDomain string `json:"failureDomain,omitempty"`

	// virtualMachineName is the VirtualMachine virtpod created for this machine.
	// +optional
	VirtualMachineName string `json:"virtualMachineName,omitempty"`

	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready, VirtualMachineReady, Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MachineInitialization is the v1beta2 contract's initialization status of an infra machine.
type MachineInitialization struct {
	// provisioned is true once the machine's VM runs.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// VirtPodMachine is the infrastructure of one Cluster API Machine: a virtpod VirtualMachine.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=cluster-api,shortName=vpm
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.metadata.labels['cluster\.x-k8s\.io/cluster-name']`
// +kubebuilder:printcolumn:name="Provisioned",type=boolean,JSONPath=`.status.initialization.provisioned`
// +kubebuilder:printcolumn:name="Bootstrap",type=string,JSONPath=`.status.conditions[?(@.type=="BootstrapSucceeded")].reason`
// +kubebuilder:printcolumn:name="ProviderID",type=string,JSONPath=`.spec.providerID`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VirtPodMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VirtPodMachineSpec   `json:"spec,omitempty"`
	Status VirtPodMachineStatus `json:"status,omitempty"`
}

// VirtPodMachineList is a list of VirtPodMachines.
// +kubebuilder:object:root=true
type VirtPodMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtPodMachine `json:"items"`
}

// VirtPodMachineTemplateSpec holds the template MachineDeployments and control planes stamp
// VirtPodMachines from.
type VirtPodMachineTemplateSpec struct {
	Template VirtPodMachineTemplateResource `json:"template"`
}

// VirtPodMachineTemplateResource is the stamped object: metadata and spec.
type VirtPodMachineTemplateResource struct {
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`
	Spec       VirtPodMachineSpec   `json:"spec"`
}

// VirtPodMachineTemplateStatus says what a machine from the template brings to its cluster, for
// the cluster autoscaler's scale from zero (Cluster API's opt-in autoscaling from zero).
type VirtPodMachineTemplateStatus struct {
	// capacity of a node made from the template: the guest's cpu and memory at boot.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`
	// nodeInfo: the node's architecture and operating system.
	// +optional
	NodeInfo *NodeInfo `json:"nodeInfo,omitempty"`
}

// NodeInfo is what the autoscaler puts in the labels of a node it imagines from the template.
type NodeInfo struct {
	// architecture, as GOARCH spells it: amd64 (virtpod runs x86 guests).
	// +optional
	Architecture string `json:"architecture,omitempty"`
	// operatingSystem, as GOOS spells it: linux.
	// +optional
	OperatingSystem string `json:"operatingSystem,omitempty"`
}

// TemplateStatus is the status a template with spec earns: the guest's cpus and memory, on
// amd64 Linux. maxCPUs and maxMemory do not count: a node starts with what it boots with.
func TemplateStatus(spec VirtPodMachineTemplateSpec) VirtPodMachineTemplateStatus {
	g := spec.Template.Spec.VirtualMachine.Spec.Guest
	capacity := corev1.ResourceList{}
	if g.CPUs > 0 {
		capacity[corev1.ResourceCPU] = *resource.NewQuantity(int64(g.CPUs), resource.DecimalSI)
	}
	if !g.Memory.IsZero() {
		capacity[corev1.ResourceMemory] = g.Memory.DeepCopy()
	}
	return VirtPodMachineTemplateStatus{Capacity: capacity, NodeInfo: &NodeInfo{Architecture: "amd64", OperatingSystem: "linux"}}
}

// VirtPodMachineTemplate is a template for VirtPodMachines.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
type VirtPodMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VirtPodMachineTemplateSpec `json:"spec,omitempty"`
	// +optional
	Status VirtPodMachineTemplateStatus `json:"status,omitempty,omitzero"`
}

// VirtPodMachineTemplateList is a list of VirtPodMachineTemplates.
// +kubebuilder:object:root=true
type VirtPodMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtPodMachineTemplate `json:"items"`
}

func init() {
	SchemeBuilder.Register(&VirtPodMachine{}, &VirtPodMachineList{},
		&VirtPodMachineTemplate{}, &VirtPodMachineTemplateList{})
}
