package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VirtualMachineMigrationSpec asks for one live migration of a running VM to another node.
// +kubebuilder:validation:XValidation:rule="has(self.claims) == has(oldSelf.claims)",message="spec.claims is immutable; create a new VirtualMachineMigration for other claims"
type VirtualMachineMigrationSpec struct {
	// vmName is the VirtualMachine to move, in the migration's namespace. Immutable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=56
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="spec.vmName must be a VirtualMachine's name: a DNS label starting with a letter, such as web-1"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.vmName is immutable; create a new VirtualMachineMigration for another VM"
	VMName string `json:"vmName"`

	// targetNode, when set, is the node to move to; otherwise the scheduler picks any node but
	// the source's. Immutable.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.targetNode is immutable; create a new VirtualMachineMigration for another node"
	// +optional
	TargetNode string `json:"targetNode,omitempty"`

	// completionTimeoutSeconds bounds the whole migration, from its start to the guest running
	// on the target: past it the transfer is cancelled, the guest keeps running on the source
	// and the migration ends Failed (Timeout).
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	// +optional
	CompletionTimeoutSeconds int64 `json:"completionTimeoutSeconds,omitempty"`

	// claims moves disks onto claims of the user's choosing: each names a disk (root, or a data
	// disk's name) on a writable claim only one node attaches, and the claim, empty, that the
	// migration copies it into in place of one it would make. Once the migration succeeds the
	// VM names these claims. Immutable.
	// +listType=map
	// +listMapKey=disk
	// +kubebuilder:validation:MaxItems=17
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.claims is immutable; create a new VirtualMachineMigration for other claims"
	// +optional
	Claims []ClaimTarget `json:"claims,omitempty"`

	// bandwidthMiBps limits the transfer (MiB/s); 0 or empty means the runner's default
	// (256 MiB/s), except for an emulated guest's memory, copied paused and so unbounded.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	// +optional
	BandwidthMiBps int64 `json:"bandwidthMiBps,omitempty"`
}

// MigrationPhase is where a migration stands.
// +kubebuilder:validation:Enum=Pending;Scheduling;Running;Succeeded;Failed
type MigrationPhase string

// Migration phases.
const (
	MigrationPending    MigrationPhase = "Pending"    // accepted, no target pod yet
	MigrationScheduling MigrationPhase = "Scheduling" // target pod made, waiting for a node and its runner
	MigrationRunning    MigrationPhase = "Running"    // the guest's state is streaming to the target
	MigrationSucceeded  MigrationPhase = "Succeeded"  // the guest runs on the target; the source is gone
	MigrationFailed     MigrationPhase = "Failed"     // ended without moving; the guest runs on one side (or as runStrategy says)
)

// VirtualMachineMigrationStatus is what happened.
type VirtualMachineMigrationStatus struct {
	// phase: Pending, Scheduling, Running, Succeeded or Failed.
	// +optional
	Phase MigrationPhase `json:"phase,omitempty"`
	// sourcePod and sourceNode: the runner pod the guest ran in when the migration started.
	// +optional
	SourcePod string `json:"sourcePod,omitempty"`
	// +optional
	SourceNode string `json:"sourceNode,omitempty"`
	// targetPod and targetNode: the runner pod made to receive the guest, and its node.
	// +optional
	TargetPod string `json:"targetPod,omitempty"`
	// +optional
	TargetNode string `json:"targetNode,omitempty"`
	// startTime is when the controller accepted the migration; completionTime when it ended.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// transferredBytes and totalBytes of guest memory and disk, as QEMU reports them.
	// +optional
	TransferredBytes int64 `json:"transferredBytes,omitempty"`
	// +optional
	TotalBytes int64 `json:"totalBytes,omitempty"`
	// downtimeMs is how long the guest was paused for the switch, as QEMU reports it.
	// +optional
	DowntimeMs int64 `json:"downtimeMs,omitempty"`
	// copiedDisks are the drives the migration copied to the target by mirroring: root (the
	// overlay over the root image, or the whole root claim), and disk-<name> for each data disk
	// it copied. Claims both nodes attach (ReadWriteMany) and read-only disks are never copied.
	// diskBytes is how much of them the mirrors have copied.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=17
	// +optional
	CopiedDisks []string `json:"copiedDisks,omitempty"`
	// +optional
	DiskBytes int64 `json:"diskBytes,omitempty"`
	// claims are the VM's claims that one node at a time attaches (ReadWriteOnce), each copied
	// into a claim made for the target (same class, access modes, volume mode and size). Once
	// the migration succeeded the VM names the target claims, and each source claim is owned by
	// this migration: deleted with it. A failed migration deletes the target claims it made.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=17
	// +optional
	Claims []MigratedClaim `json:"claims,omitempty"`
	// conditions: Completed (False while in progress and on failure, with the cause).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ClaimTarget names the claim a migration copies one disk into.
type ClaimTarget struct {
	// disk is root for the root disk, or the data disk's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Disk string `json:"disk"`
	// claimName is an existing, empty PersistentVolumeClaim in the migration's namespace.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="spec.claims[].claimName must be a PersistentVolumeClaim name (a DNS subdomain) such as data-2"
	ClaimName string `json:"claimName"`
}

// MigratedClaim is one claim a migration copies: the source's, and the one made for the target.
type MigratedClaim struct {
	// disk is root for the root disk, or the data disk's name.
	// +kubebuilder:validation:MaxLength=63
	Disk string `json:"disk"`
	// source is the claim the guest's disk was on; target the claim made for it on the target.
	// +kubebuilder:validation:MaxLength=253
	Source string `json:"source"`
	// +kubebuilder:validation:MaxLength=253
	Target string `json:"target"`
}

// Terminal says whether the migration has ended.
func (s *VirtualMachineMigrationStatus) Terminal() bool {
	return s.Phase == MigrationSucceeded || s.Phase == MigrationFailed
}

// VirtualMachineMigration moves a running VirtualMachine's guest to another node without a
// reboot: a target runner pod receives its memory and disk overlay, then replaces the source.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vmmig,categories=virtpod
// +kubebuilder:printcolumn:name="VM",type=string,JSONPath=`.spec.vmName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.status.sourceNode`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.status.targetNode`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Completed")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VirtualMachineMigration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VirtualMachineMigrationSpec   `json:"spec"`
	Status VirtualMachineMigrationStatus `json:"status,omitempty"`
}

// VirtualMachineMigrationList is a list of VirtualMachineMigrations.
// +kubebuilder:object:root=true
type VirtualMachineMigrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineMigration `json:"items"`
}

func init() {
	SchemeBuilder.Register(&VirtualMachineMigration{}, &VirtualMachineMigrationList{})
}
