package v1alpha1

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KVMState says whether a node's KVM can run guests.
// +kubebuilder:validation:Enum=Usable;Unusable;Absent
type KVMState string

// KVM states.
const (
	KVMUsable   KVMState = "Usable"   // /dev/kvm opens and runs guest code
	KVMUnusable KVMState = "Unusable" // /dev/kvm is there but cannot run a guest; the reason says why
	KVMAbsent   KVMState = "Absent"   // no /dev/kvm
)

// KVMStatus is what the node agent found of /dev/kvm.
type KVMStatus struct {
	// state is Usable, Unusable or Absent.
	State KVMState `json:"state"`
	// reason explains a state other than Usable, in words.
	// +optional
	Reason string `json:"reason,omitempty"`
	// device is the path probed.
	// +optional
	Device string `json:"device,omitempty"`
}

// EmulationStatus says whether software emulation (QEMU TCG) can run guests on the node.
type EmulationStatus struct {
	// available is true when the runner's QEMU has its TCG accelerator.
	Available bool `json:"available"`
	// reason explains why emulation is not available.
	// +optional
	Reason string `json:"reason,omitempty"`
}

// ProviderStatus is one hypervisor as found on the node.
type ProviderStatus struct {
	// name is the provider: qemu or cloud-hypervisor.
	Name Provider `json:"name"`
	// binary is the path probed.
	// +optional
	Binary string `json:"binary,omitempty"`
	// version the binary reports.
	// +optional
	Version string `json:"version,omitempty"`
	// available is true when the binary is present and runs.
	Available bool `json:"available"`
	// reason explains why the provider is not available.
	// +optional
	Reason string `json:"reason,omitempty"`
}

// HypervisorNodeStatus is what the node agent last found on its node.
type HypervisorNodeStatus struct {
	// heartbeatTime is when the agent last probed; results older than two minutes are stale.
	// +optional
	HeartbeatTime metav1.Time `json:"heartbeatTime,omitempty"`
	// arch is the node's architecture, as GOARCH names it.
	// +optional
	Arch string `json:"arch,omitempty"`
	// kernelVersion is the node's kernel release.
	// +optional
	KernelVersion string `json:"kernelVersion,omitempty"`
	// agentVersion is the node agent's version.
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`
	// kvm is the state of /dev/kvm.
	// +optional
	KVM KVMStatus `json:"kvm,omitempty"`
	// emulation says whether software emulation is available.
	// +optional
	Emulation EmulationStatus `json:"emulation,omitempty"`
	// providers are the hypervisors the runner image carries, as they run on this node.
	// +listType=map
	// +listMapKey=name
	// +optional
	Providers []ProviderStatus `json:"providers,omitempty"`
}

// SameReport says whether two reports say the same of the node, heartbeat aside: the heartbeat
// changes every probe, the findings rarely.
func (s *HypervisorNodeStatus) SameReport(o *HypervisorNodeStatus) bool {
	a, b := *s, *o
	a.HeartbeatTime, b.HeartbeatTime = metav1.Time{}, metav1.Time{}
	return equality.Semantic.DeepEqual(a, b)
}

// ReportStaleAfter is how old a HypervisorNode's heartbeat may be before its report no longer
// counts: the device plugin stops handing out devices.virtpod.io/kvm, the ProviderClass status
// counts the node as not fitting and vmctl marks it stale, all at the same moment. The agent
// reports every 30 s, so this is four missed reports (the kubelet's node lease allows as many
// missed renewals): an API server restart does not flap the node, a dead agent's node stops
// taking KVM VMs within two minutes.
const ReportStaleAfter = 2 * time.Minute

// Stale says whether the report is too old to count at now (ReportStaleAfter); a report never
// written is stale.
func (s *HypervisorNodeStatus) Stale(now time.Time) bool {
	return now.Sub(s.HeartbeatTime.Time) > ReportStaleAfter
}

// KVMUsableAt reads the agent's KVM verdict back from its report: KVM is usable on the node at
// now when the agent found it Usable and the report is not stale. Otherwise it says why not. The
// controller (placement) and the device plugin (health) both decide by it.
func (s *HypervisorNodeStatus) KVMUsableAt(now time.Time) (bool, string) {
	switch {
	case s.KVM.State == "":
		return false, "the node agent has not reported KVM"
	case s.KVM.State != KVMUsable:
		return false, fmt.Sprintf("KVM %s: %s", s.KVM.State, s.KVM.Reason)
	case s.HeartbeatTime.IsZero():
		return false, "no heartbeat yet"
	case s.Stale(now):
		return false, fmt.Sprintf("heartbeat %v old (stale after %v)", now.Sub(s.HeartbeatTime.Time).Round(time.Second), ReportStaleAfter)
	}
	return true, ""
}

// HypervisorNode is what virtpod's node agent found on one node: KVM, emulation, and each
// hypervisor with its version or the reason it cannot run. Named after its node; written only
// by the agent on that node.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=hvnode,categories=virtpod
// +kubebuilder:printcolumn:name="KVM",type=string,JSONPath=`.status.kvm.state`
// +kubebuilder:printcolumn:name="Emulation",type=boolean,JSONPath=`.status.emulation.available`
// +kubebuilder:printcolumn:name="Arch",type=string,JSONPath=`.status.arch`
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.heartbeatTime`
// +kubebuilder:printcolumn:name="KVM-Reason",type=string,JSONPath=`.status.kvm.reason`,priority=1
type HypervisorNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status HypervisorNodeStatus `json:"status,omitempty"`
}

// HypervisorNodeList is a list of HypervisorNodes.
// +kubebuilder:object:root=true
type HypervisorNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HypervisorNode `json:"items"`
}

// Node labels the agent keeps on its node, so runner pods can require what they need, and the
// extended resources virtpod's device plugin serves.
const (
	// LabelKVM is "true" on nodes whose KVM can run guests, "false" elsewhere.
	LabelKVM = "virtpod.io/kvm"
	// LabelEmulation is "true" on nodes that can run guests under software emulation.
	LabelEmulation = "virtpod.io/emulation"
	// LabelProviderPrefix + provider name is "true" on nodes where that hypervisor runs.
	LabelProviderPrefix = "provider.virtpod.io/"

	// ResourceKVM hands /dev/kvm to a pod without privileges: every runner pod of a KVM VM
	// requests one, and a node has them allocatable only while its KVM is usable.
	ResourceKVM corev1.ResourceName = "devices.virtpod.io/kvm"
	// ResourceKVMProbe is the node agent's own: always allocatable, with /dev/kvm where the node
	// has one, so the agent starts on every node and can find KVM absent.
	ResourceKVMProbe corev1.ResourceName = "devices.virtpod.io/kvm-probe"
)

func init() {
	SchemeBuilder.Register(&HypervisorNode{}, &HypervisorNodeList{})
}
