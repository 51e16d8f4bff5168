package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VirtualMachineSnapshotSpec asks for one copy of a VM's disks on claims, at one instant.
type VirtualMachineSnapshotSpec struct {
	// vmName is the VirtualMachine whose disks are copied, in the snapshot's namespace. Immutable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=56
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="spec.vmName must be a VirtualMachine's name: a DNS label starting with a letter, such as web-1"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.vmName is immutable; create a new VirtualMachineSnapshot for another VM"
	VMName string `json:"vmName"`

	// storageClassName is the StorageClass of the snapshot's claims; empty: each disk's own
	// claim's class. Immutable.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.storageClassName is immutable; create a new VirtualMachineSnapshot"
	// +optional
	StorageClassName string `json:"storageClassName,omitempty"`

	// full copies every disk whole even when the VM's last snapshot would let this one copy
	// only the blocks written since (incremental). Immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.full is immutable; create a new VirtualMachineSnapshot"
	// +optional
	Full bool `json:"full,omitempty"`

	// deadlineSeconds bounds the snapshot from its start: past it the copy is stopped, what it
	// made is deleted and the snapshot ends Failed (Timeout).
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	// +optional
	DeadlineSeconds int64 `json:"deadlineSeconds,omitempty"`
}

// SnapshotPhase is where a snapshot or a restore stands.
// +kubebuilder:validation:Enum=Pending;InProgress;Succeeded;Failed
type SnapshotPhase string

// Snapshot and restore phases.
const (
	SnapshotPending    SnapshotPhase = "Pending"    // accepted; waiting for the VM to be running or stopped
	SnapshotInProgress SnapshotPhase = "InProgress" // claims and the copier pod made; copying
	SnapshotSucceeded  SnapshotPhase = "Succeeded"  // the copy is complete and usable
	SnapshotFailed     SnapshotPhase = "Failed"     // ended without a copy; what it made is deleted
)

// Consistency says what state of the guest a snapshot holds.
// +kubebuilder:validation:Enum=GuestFrozen;CrashConsistent;Offline
type Consistency string

// Consistencies.
const (
	// ConsistencyGuestFrozen: the guest agent froze the guest's file systems at the instant.
	ConsistencyGuestFrozen Consistency = "GuestFrozen"
	// ConsistencyCrashConsistent: every disk at one instant, as after a power cut.
	ConsistencyCrashConsistent Consistency = "CrashConsistent"
	// ConsistencyOffline: the VM was stopped; its disks as its guest left them.
	ConsistencyOffline Consistency = "Offline"
)

// VirtualMachineSnapshotStatus is what the snapshot holds and how it got there.
type VirtualMachineSnapshotStatus struct {
	// +optional
	Phase SnapshotPhase `json:"phase,omitempty"`
	// consistency: GuestFrozen, CrashConsistent (a running guest) or Offline (a stopped one).
	// +optional
	Consistency Consistency `json:"consistency,omitempty"`
	// sourcePod is the runner pod whose QEMU copied a running guest's disks ("" for a stopped
	// VM); sourceNode its node; copierPod the pod that wrote the snapshot's claims.
	// +optional
	SourcePod string `json:"sourcePod,omitempty"`
	// +optional
	SourcePodUID string `json:"sourcePodUID,omitempty"`
	// +optional
	SourceNode string `json:"sourceNode,omitempty"`
	// +optional
	CopierPod string `json:"copierPod,omitempty"`
	// disks are the VM's writable disks on claims and the claim each was copied into.
	// +listType=map
	// +listMapKey=disk
	// +kubebuilder:validation:MaxItems=17
	// +optional
	Disks []SnapshotDisk `json:"disks,omitempty"`
	// base is the snapshot this one was built on: only the blocks written since it were copied
	// from the guest (incremental); "" for a full copy.
	// +optional
	Base string `json:"base,omitempty"`
	// bitmap is the dirty bitmap this snapshot started in the guest's QEMU: the next snapshot
	// of the same run copies only what it marks.
	// +optional
	Bitmap string `json:"bitmap,omitempty"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// conditions: Ready (True once the snapshot can be restored; False with the cause while it
	// is made or when it failed).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SnapshotDisk is one disk of a snapshot.
type SnapshotDisk struct {
	// disk is root, or the data disk's name.
	// +kubebuilder:validation:MaxLength=63
	Disk string `json:"disk"`
	// sourceClaim is the VM's claim; claimName the snapshot's, owned by the snapshot.
	// +kubebuilder:validation:MaxLength=253
	SourceClaim string `json:"sourceClaim"`
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName"`
	// sizeBytes is the disk's size; copiedBytes how much of it was read from the guest's disk.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// +optional
	CopiedBytes int64 `json:"copiedBytes,omitempty"`
}

// Terminal says whether the snapshot has ended.
func (s *VirtualMachineSnapshotStatus) Terminal() bool {
	return s.Phase == SnapshotSucceeded || s.Phase == SnapshotFailed
}

// VirtualMachineSnapshot is a copy of a VirtualMachine's writable disks on claims of its own,
// taken at one instant from a running guest (without stopping it) or from a stopped VM. A
// VirtualMachineRestore puts it back, or makes a new VM from it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vmsnap,categories=virtpod
// +kubebuilder:printcolumn:name="VM",type=string,JSONPath=`.spec.vmName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Consistency",type=string,JSONPath=`.status.consistency`
// +kubebuilder:printcolumn:name="Base",type=string,JSONPath=`.status.base`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VirtualMachineSnapshot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VirtualMachineSnapshotSpec   `json:"spec"`
	Status VirtualMachineSnapshotStatus `json:"status,omitempty"`
}

// VirtualMachineSnapshotList is a list of VirtualMachineSnapshots.
// +kubebuilder:object:root=true
type VirtualMachineSnapshotList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineSnapshot `json:"items"`
}

// VirtualMachineRestoreSpec puts a snapshot's disks back.
type VirtualMachineRestoreSpec struct {
	// snapshotName is a Succeeded VirtualMachineSnapshot in the restore's namespace. Immutable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.snapshotName is immutable; create a new VirtualMachineRestore"
	SnapshotName string `json:"snapshotName"`
	// vmName is the VM to restore: the snapshot's own VM, stopped, gets its disks replaced by
	// copies of the snapshot's; any other name must not exist, and a new VM of that name is made
	// from the snapshot's VM with copies of the snapshot's disks (a clone: its own claims, MAC
	// and cloud-init instance). Immutable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=56
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="spec.vmName must be a VirtualMachine's name: a DNS label starting with a letter, such as web-1"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.vmName is immutable; create a new VirtualMachineRestore"
	VMName string `json:"vmName"`
	// deadlineSeconds bounds the restore from its start (Failed, Timeout).
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	// +optional
	DeadlineSeconds int64 `json:"deadlineSeconds,omitempty"`
}

// VirtualMachineRestoreStatus is what the restore did.
type VirtualMachineRestoreStatus struct {
	// +optional
	Phase SnapshotPhase `json:"phase,omitempty"`
	// clone: the VM did not exist and the restore made it.
	// +optional
	Clone bool `json:"clone,omitempty"`
	// copierPod is the pod that copies the snapshot's claims into the new ones.
	// +optional
	CopierPod string `json:"copierPod,omitempty"`
	// claims are the claims made for the VM, one per disk of the snapshot, and (restore in
	// place) the VM's claims they replace: those are owned by this restore once it succeeded,
	// and deleted with it.
	// +listType=map
	// +listMapKey=disk
	// +kubebuilder:validation:MaxItems=17
	// +optional
	Claims []RestoredClaim `json:"claims,omitempty"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// conditions: Ready (True once the VM names the restored claims).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RestoredClaim is one disk a restore put back.
type RestoredClaim struct {
	// +kubebuilder:validation:MaxLength=63
	Disk string `json:"disk"`
	// from is the snapshot's claim; claimName the VM's new claim; replaced the claim it
	// replaces ("" for a clone).
	// +kubebuilder:validation:MaxLength=253
	From string `json:"from"`
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName"`
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Replaced string `json:"replaced,omitempty"`
}

// Terminal says whether the restore has ended.
func (s *VirtualMachineRestoreStatus) Terminal() bool {
	return s.Phase == SnapshotSucceeded || s.Phase == SnapshotFailed
}

// VirtualMachineRestore replaces a stopped VM's disks by a snapshot's, or makes a new VM from a
// snapshot (clone).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vmrestore,categories=virtpod
// +kubebuilder:printcolumn:name="Snapshot",type=string,JSONPath=`.spec.snapshotName`
// +kubebuilder:printcolumn:name="VM",type=string,JSONPath=`.spec.vmName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Clone",type=boolean,JSONPath=`.status.clone`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VirtualMachineRestore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VirtualMachineRestoreSpec   `json:"spec"`
	Status VirtualMachineRestoreStatus `json:"status,omitempty"`
}

// VirtualMachineRestoreList is a list of VirtualMachineRestores.
// +kubebuilder:object:root=true
type VirtualMachineRestoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineRestore `json:"items"`
}

// LastSnapshot is a VM's newest snapshot taken from its running guest: the next one from the
// same run (same runner pod) copies only the blocks marked in its bitmap.
type LastSnapshot struct {
	// name is the VirtualMachineSnapshot.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// bitmap is the dirty bitmap it started in the guest's QEMU.
	// +kubebuilder:validation:MaxLength=63
	Bitmap string `json:"bitmap"`
	// podUID is the runner pod whose QEMU holds the bitmap: gone with it.
	// +kubebuilder:validation:MaxLength=64
	PodUID string `json:"podUID"`
}

// Snapshot annotations on a runner pod: the controller asks the node agent to copy the guest's
// disks into the snapshot's copier pod; the agent answers in AnnotationSnapshotResult (JSON:
// the snapshot's name and the runner's controlapi.BackupStatus).
const (
	AnnotationSnapshot       = "vm.virtpod.io/snapshot"
	AnnotationSnapshotResult = "vm.virtpod.io/snapshot-result"
)

// LabelCopierOf is on a copier pod: the snapshot or restore it copies disks for. Its one
// container is CopierContainer; the node agent follows runner pods only, never a pod with this
// label, and finds a copier's control directory by that container's device.
const (
	LabelCopierOf   = "vm.virtpod.io/copier-of"
	CopierContainer = "copier"
)

func init() {
	SchemeBuilder.Register(&VirtualMachineSnapshot{}, &VirtualMachineSnapshotList{}, &VirtualMachineRestore{}, &VirtualMachineRestoreList{})
}
