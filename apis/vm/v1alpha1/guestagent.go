package v1alpha1

// The guest agent: QEMU guests get a virtio-serial channel (org.qemu.guest_agent.0) that
// qemu-guest-agent in the guest answers on. The runner asks it, the node agent writes what it
// said into the runner pod (AnnotationGuestFacts, JSON), and the controller copies that into
// status.guest and the AgentConnected condition. Everything in it comes from the guest: it is
// bounded and cleaned on the way (pkg/guestagent), and no decision is made on it.

// AnnotationGuestFacts on a runner pod is what the guest agent said last, written by the node
// agent only when it changed.
const AnnotationGuestFacts = "vm.virtpod.io/guest-facts"

// GuestOSInfo is the guest's operating system (the agent's guest-get-osinfo, from the guest's
// os-release and uname).
type GuestOSInfo struct {
	// id is os-release's ID, such as debian.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	ID string `json:"id,omitempty"`
	// name is os-release's NAME, such as Debian GNU/Linux.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Name string `json:"name,omitempty"`
	// prettyName is os-release's PRETTY_NAME.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	PrettyName string `json:"prettyName,omitempty"`
	// version is os-release's VERSION, such as 12 (bookworm).
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Version string `json:"version,omitempty"`
	// versionID is os-release's VERSION_ID, such as 12.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	VersionID string `json:"versionID,omitempty"`
	// kernelRelease is the running kernel's release (uname -r).
	// +kubebuilder:validation:MaxLength=128
	// +optional
	KernelRelease string `json:"kernelRelease,omitempty"`
}

// GuestInterface is one network interface of the guest.
type GuestInterface struct {
	// name is the guest's name for it, such as eth0.
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`
	// mac is its hardware address.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	MAC string `json:"mac,omitempty"`
	// ips are its addresses with their prefix length, such as 10.0.2.2/24.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=64
	// +listType=atomic
	// +optional
	IPs []string `json:"ips,omitempty"`
}

// MessageBootstrapSentinel is the sentinel's path, as conditions name it.
const MessageBootstrapSentinel = "/run/cluster-api/bootstrap-success.complete"

// GuestBootstrap is what the guest agent found of the guest's bootstrap (pkg/guestagent reads
// the two files through it, bounded): a Cluster API worker's kubeadm join succeeded when the
// sentinel is there; cloud-init ended when its result is, with its errors.
type GuestBootstrap struct {
	// sentinel: Cluster API's /run/cluster-api/bootstrap-success.complete exists, which its
	// bootstrap providers write once the bootstrap (kubeadm init or join) succeeded.
	// +optional
	Sentinel bool `json:"sentinel,omitempty"`
	// cloudInitDone: cloud-init ended (it wrote /run/cloud-init/result.json).
	// +optional
	CloudInitDone bool `json:"cloudInitDone,omitempty"`
	// cloudInitErrors are the errors cloud-init's result lists (the first 8, 256 characters
	// each).
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=atomic
	// +optional
	CloudInitErrors []string `json:"cloudInitErrors,omitempty"`
}
