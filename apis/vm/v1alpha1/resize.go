package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Live resize (docs/api.md#live-resize): the contract between the controller, the node agent
// and the runner. The controller resizes the runner pod in place (pods/resize) and writes the
// size it wants the guest to have into the pod's desired-* annotations; the node agent on the
// pod's node asks the runner for it over the pod's control socket and writes back what the
// guest really has into the guest-* annotations, which the controller copies into
// status.guest.

// Pod annotations of a live resize. Desired ones are the controller's; guest ones and the error
// are the node agent's (a ValidatingAdmissionPolicy lets it change nothing else, and only on
// pods of its own node). Memory is a quantity such as 768Mi.
const (
	AnnotationDesiredCPUs   = "vm.virtpod.io/desired-cpus"
	AnnotationDesiredMemory = "vm.virtpod.io/desired-memory"
	AnnotationGuestCPUs     = "vm.virtpod.io/guest-cpus"
	AnnotationGuestMemory   = "vm.virtpod.io/guest-memory"
	// AnnotationResizeError is the runner's refusal or failure of the last resize in words
	// (the guest did not take it); the agent removes it once a resize succeeds.
	AnnotationResizeError = "vm.virtpod.io/resize-error"
)

// The control channel: the device plugin's ResourceControl devices are directories under
// HostControlDir on the node, each mounted into one runner container at ControlDir; the runner
// serves its control API on ControlSocketName there and only the node agent reaches it.
const (
	ResourceControl   corev1.ResourceName = "devices.virtpod.io/control"
	HostControlDir                        = "/var/lib/virtpod/control"
	ControlDir                            = "/run/virtpod/control"
	ControlSocketName                     = "runner.sock"
)

// GuestStatus is the size the running guest has.
type GuestStatus struct {
	// cpus the guest has online.
	CPUs int32 `json:"cpus"`
	// memory the guest has: its boot memory plus what was plugged and not taken back.
	Memory resource.Quantity `json:"memory"`
	// os is the guest's operating system as its guest agent says (guestagent.go); absent
	// without an agent.
	// +optional
	OS *GuestOSInfo `json:"os,omitempty"`
	// hostname is the guest's own, as its guest agent says.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Hostname string `json:"hostname,omitempty"`
	// interfaces are the guest's network interfaces (loopback left out) with the addresses
	// it holds, as its guest agent says. In the Masquerade mode these are the guest's own
	// (10.0.2.2); status.podIP is the VM's address either way.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Interfaces []GuestInterface `json:"interfaces,omitempty"`
	// bootstrap is what the guest agent found of the guest's first-boot configuration:
	// Cluster API's bootstrap sentinel and cloud-init's result. Absent without an agent, or
	// while neither is there.
	// +optional
	Bootstrap *GuestBootstrap `json:"bootstrap,omitempty"`
}

// EffectiveMaxCPUs is maxCPUs, or cpus when the VM was created without it.
func (g *GuestSpec) EffectiveMaxCPUs() int32 {
	if g.MaxCPUs != nil {
		return *g.MaxCPUs
	}
	return g.CPUs
}

// EffectiveMaxMemory is maxMemory, or memory when the VM was created without it.
func (g *GuestSpec) EffectiveMaxMemory() resource.Quantity {
	if g.MaxMemory != nil {
		return *g.MaxMemory
	}
	return g.Memory
}

// Resizable says whether the guest can change size live: it was created with room to grow
// (or shrink and grow back).
func (g *GuestSpec) Resizable() bool { return g.MaxCPUs != nil || g.MaxMemory != nil }
