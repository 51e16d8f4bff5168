package v1alpha1

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationDefaultClass marks the ProviderClass VMs get when they name no provider.
const AnnotationDefaultClass = "provider.virtpod.io/is-default-class"

// ProviderClassSpec is how the cluster offers one hypervisor, modelled on RuntimeClass.
type ProviderClassSpec struct {
	// handler is the hypervisor: qemu or cloud-hypervisor. Immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.handler is immutable; create another ProviderClass"
	Handler Provider `json:"handler"`

	// enabled lets admins stop new VMs of this class from starting; running VMs keep running.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// disabledReason says why the class is disabled; it is shown on the VMs it blocks.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	DisabledReason string `json:"disabledReason,omitempty"`

	// allowEmulation lets VMs of this class run under software emulation (acceleration:
	// Emulated). Without it such VMs are refused with a reason, never started.
	// +optional
	AllowEmulation bool `json:"allowEmulation,omitempty"`

	// scheduling restricts runner pods of this class to some nodes, as RuntimeClass does.
	// +optional
	Scheduling *ProviderScheduling `json:"scheduling,omitempty"`

	// runnerImage is the runner image for VMs of this class that name none; empty means the
	// controller's --runner-image. The controller's image map still applies to it.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$')",message="spec.runnerImage must be an image reference such as registry.example.com/virtpod/runner:v1"
	// +optional
	RunnerImage string `json:"runnerImage,omitempty"`

	// allowedRunnerImages are the runner images a VM of this class may name in its own
	// spec.runnerImage; the runner container holds NET_ADMIN and /dev/kvm, so only an admin
	// decides what runs there. An entry is an image reference (that image exactly, as the VM
	// spells it) or a repository without tag or digest (any tag or digest of it). Empty: VMs of
	// this class may not name a runner image. A ValidatingAdmissionPolicy refuses others at
	// admission (config/admission) and the controller holds any that got past it.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$`
	// +listType=set
	// +optional
	AllowedRunnerImages []string `json:"allowedRunnerImages,omitempty"`

	// runnerFeatures are what the class's runner image (the controller's --runner-image when the
	// class names none) can do beyond booting a guest, which not every runner image can: VirtioFS
	// (it carries virtiofsd, for spec.guest.filesystems). A VM that needs a feature its class's
	// runner lacks gets no runner pod: its ProviderAvailable condition says which feature and how
	// to get it. The release's classes state what the release's images hold (checked when the
	// images are built); a class an admin makes states what its image holds. A VM that names its
	// own spec.runnerImage is not held by this list (the runner refuses what its image lacks).
	// +kubebuilder:validation:MaxItems=8
	// +listType=set
	// +optional
	RunnerFeatures []RunnerFeature `json:"runnerFeatures,omitempty"`

	// overhead is added to each runner pod's resource requests, for the hypervisor itself.
	// +optional
	Overhead corev1.ResourceList `json:"overhead,omitempty"`
}

// RunnerFeature is something a runner image can do that another may not.
// +kubebuilder:validation:Enum=VirtioFS
type RunnerFeature string

// Runner features.
const (
	// RunnerFeatureVirtioFS: the image carries virtiofsd, which serves spec.guest.filesystems.
	RunnerFeatureVirtioFS RunnerFeature = "VirtioFS"
)

// RunnerLacks lists the features spec needs that the class's runner does not have, in order.
func (s *ProviderClassSpec) RunnerLacks(spec *VirtualMachineSpec) []RunnerFeature {
	var lacks []RunnerFeature
	for _, f := range spec.RunnerFeaturesNeeded() {
		if !slices.Contains(s.RunnerFeatures, f) {
			lacks = append(lacks, f)
		}
	}
	return lacks
}

// AllowsRunnerImage says whether a VM of this class may name image as its runner image: the
// class's own runner image, or one allowedRunnerImages lists (exactly, or by repository). The
// admission policy in config/admission says the same in CEL; a test holds them to one table.
func (s *ProviderClassSpec) AllowsRunnerImage(image string) bool {
	if image == "" || image == s.RunnerImage {
		return true
	}
	for _, a := range s.AllowedRunnerImages {
		if image == a || strings.HasPrefix(image, a+":") || strings.HasPrefix(image, a+"@") {
			return true
		}
	}
	return false
}

// ProviderScheduling are node constraints merged into each runner pod of the class.
type ProviderScheduling struct {
	// nodeSelector is added to every required node-selector term of the runner pod.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// tolerations are appended to the runner pod's.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// ProviderClassStatus is where the class can run, from the node agents' reports.
type ProviderClassStatus struct {
	// readyNodes is the number of nodes with a fresh report on which this hypervisor runs.
	ReadyNodes int32 `json:"readyNodes"`
	// totalNodes is the number of nodes with a node agent report.
	TotalNodes int32 `json:"totalNodes"`
	// versions are the hypervisor versions seen on ready nodes.
	// +optional
	Versions []string `json:"versions,omitempty"`
	// default is true when VirtualMachines that name no provider get this class: it is the one
	// class annotated provider.virtpod.io/is-default-class="true". Admission (config/admission,
	// a MutatingAdmissionPolicy) reads it to set spec.provider as a VM is created.
	// +optional
	Default bool `json:"default,omitempty"`
	// observedGeneration is the spec generation this status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Enabled and Available.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ProviderClass offers one hypervisor to VirtualMachines: whether it is enabled, where it may
// run, and where it can. A class is named after its handler; a VM's spec.provider names it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=pc,categories=virtpod
// +kubebuilder:printcolumn:name="Handler",type=string,JSONPath=`.spec.handler`
// +kubebuilder:printcolumn:name="Enabled",type=boolean,JSONPath=`.spec.enabled`
// +kubebuilder:printcolumn:name="Default",type=boolean,JSONPath=`.status.default`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyNodes`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.totalNodes`
// +kubebuilder:printcolumn:name="Emulation",type=boolean,JSONPath=`.spec.allowEmulation`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].message`,priority=1
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.handler",message="metadata.name: a ProviderClass is named after its handler (qemu or cloud-hypervisor)"
type ProviderClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProviderClassSpec   `json:"spec"`
	Status ProviderClassStatus `json:"status,omitempty"`
}

// ProviderClassList is a list of ProviderClasses.
// +kubebuilder:object:root=true
type ProviderClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProviderClass `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ProviderClass{}, &ProviderClassList{})
}
