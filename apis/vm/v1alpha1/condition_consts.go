package v1alpha1

// Condition types and reasons of the kinds in this group, in one place so that users, tools and
// other controllers can import them. Each reason is named after its value. docs/api.md has a
// table of every one, kept complete by apis/conditions_doc_test.go. A HypervisorNode has no
// conditions: its kvm, emulation and providers carry their reasons in words.

// VirtualMachine condition types.
const (
	// ConditionScheduled is True once the runner pod is bound to a node.
	ConditionScheduled = "Scheduled"
	// ConditionReady is True while the guest runs and, when it has a readiness probe, passes it.
	ConditionReady = "Ready"
	// ConditionImagesCurrent is True while the runner pod uses the VM's effective images.
	ConditionImagesCurrent = "ImagesCurrent"
	// ConditionProviderAvailable is True when the VM's ProviderClass exists, is enabled and
	// allows what the VM asks for.
	ConditionProviderAvailable = "ProviderAvailable"
	// ConditionSoftwareEmulation is True when the guest runs under software emulation.
	ConditionSoftwareEmulation = "SoftwareEmulation"
)

// VirtualMachine condition DisksReady: whether the claims and ConfigMaps the VM's disks name are
// there to use. Set only for a VM that names any (a root disk or a data disk on a claim, a
// ConfigMap or Secret disk); while it is False no runner pod starts, and Scheduled and Ready carry
// the same reason and message.
const (
	ConditionDisksReady = "DisksReady"

	// ReasonDisksReady: every claim is bound, or waits for the runner pod (WaitForFirstConsumer),
	// and every ConfigMap exists. Secrets are not read: the message names them.
	ReasonDisksReady = "DisksReady"
	// ReasonClaimNotFound: a PersistentVolumeClaim the VM names does not exist.
	ReasonClaimNotFound = "ClaimNotFound"
	// ReasonClaimPending: a claim waits for a volume that no runner pod will bring (its class
	// binds Immediately, or it has none).
	ReasonClaimPending = "ClaimPending"
	// ReasonClaimLost: a claim's volume is gone (phase Lost).
	ReasonClaimLost = "ClaimLost"
	// ReasonClaimDeleting: a claim is being deleted.
	ReasonClaimDeleting = "ClaimDeleting"
	// ReasonClaimInUse: another VirtualMachine (named) uses the claim, and one of them writes it.
	ReasonClaimInUse = "ClaimInUse"
	// ReasonConfigMapNotFound: a ConfigMap a disk names does not exist.
	ReasonConfigMapNotFound = "ConfigMapNotFound"
)

// VirtualMachine reasons of Scheduled and Ready: where the runner pod and the guest are.
const (
	ReasonNoRunnerPod         = "NoRunnerPod"
	ReasonRestartBackoff      = "RestartBackoff"
	ReasonWaitingForScheduler = "WaitingForScheduler"
	ReasonUnschedulable       = "Unschedulable"
	ReasonScheduled           = "Scheduled"
	ReasonStarting            = "Starting"
	ReasonGuestBooting        = "GuestBooting"
	ReasonGuestRunning        = "GuestRunning"
	// ReasonGuestNotReady: the guest runs but has not passed its readiness probe.
	ReasonGuestNotReady = "GuestNotReady"
	ReasonStopping      = "Stopping"
	ReasonGuestStopped  = "GuestStopped"
	ReasonRunnerFailed  = "RunnerFailed"
	// ReasonHalted: runStrategy is Halted and the guest is off, with no runner pod (phase
	// Stopped); a start (vmctl start) changes the strategy.
	ReasonHalted = "Halted"
	// ReasonPodNameTaken: a pod that is not the VM's holds the runner pod's name.
	ReasonPodNameTaken = "PodNameTaken"
	// ReasonRunnerPodInvalid: the API server refused the runner pod built from the VM's spec.
	ReasonRunnerPodInvalid = "RunnerPodInvalid"
	// ReasonPodSecurityForbidden: the namespace's Pod Security level refuses runner pods, which
	// need NET_ADMIN, NET_RAW and MKNOD (level privileged).
	ReasonPodSecurityForbidden = "PodSecurityForbidden"
	// ReasonNodeNotReady and ReasonNodeDeleted: the runner pod's node is lost.
	ReasonNodeNotReady = "NodeNotReady"
	ReasonNodeDeleted  = "NodeDeleted"
)

// VirtualMachine reasons of ImagesCurrent.
const (
	ReasonCurrent         = "Current"
	ReasonRestartRequired = "RestartRequired"
	ReasonRecreating      = "Recreating"
)

// VirtualMachine reasons of ProviderAvailable (which also hold Scheduled and Ready when no new
// runner pod may start) and of SoftwareEmulation.
const (
	ReasonProviderAvailable   = "ProviderAvailable"
	ReasonProviderNotFound    = "ProviderNotFound"
	ReasonProviderDisabled    = "ProviderDisabled"
	ReasonNoDefaultProvider   = "NoDefaultProvider"
	ReasonEmulationNotAllowed = "EmulationNotAllowed"
	// ReasonRunnerImageNotAllowed: spec.runnerImage is not one the ProviderClass allows.
	ReasonRunnerImageNotAllowed = "RunnerImageNotAllowed"
	// ReasonRunnerLacksFeature: the VM needs what its ProviderClass's runner image cannot do
	// (spec.runnerFeatures), such as virtio-fs for spec.guest.filesystems.
	ReasonRunnerLacksFeature = "RunnerLacksFeature"
	ReasonEmulationRequested = "EmulationRequested"
	ReasonKVM                = "KVM"
)

// VirtualMachine condition Resized: where a live resize of cpus or memory stands. Set once the
// spec asks the running guest for a size it does not have, and kept (True, Resized) once it has
// it, until the runner pod is gone (a new one boots at the spec's size).
const (
	ConditionResized = "Resized"

	// ReasonResizeInProgress: the runner pod is being resized in place, or the guest is being
	// given or giving back CPUs and memory; the message says which step.
	ReasonResizeInProgress = "ResizeInProgress"
	// ReasonResized: the guest has the size the spec asks for.
	ReasonResized = "Resized"
	// ReasonResizeInfeasible: the node can never fit the new size (the kubelet's message); the
	// guest is not grown. Lower the spec again, or recreate the VM elsewhere.
	ReasonResizeInfeasible = "ResizeInfeasible"
	// ReasonResizeDeferred: the node cannot fit the new size now (the kubelet's message); it
	// grows the pod, then the guest, once room frees up.
	ReasonResizeDeferred = "ResizeDeferred"
	// ReasonGuestResizeFailed: the runner or the guest refused or did not finish the resize
	// (the runner's words), such as a guest that does not give memory back.
	ReasonGuestResizeFailed = "GuestResizeFailed"
)

// VirtualMachine condition Migratable: whether the running guest can be live-migrated, and if
// not, what stands in the way (the message names the field and the fix). Only on running VMs.
const (
	ConditionMigratable = "Migratable"

	// ReasonMigratable: the guest can move (qemu, Masquerade network, image-based root disk, no
	// claims, at its boot size).
	ReasonMigratable = "Migratable"
	// ReasonNetworkNotMigratable: the guest owns the pod IP (networkMode Pod), which stays with
	// the pod; set spec.guest.networkMode Masquerade (applies at the next start).
	ReasonNetworkNotMigratable = "NetworkNotMigratable"
	// ReasonProviderNotMigratable: only qemu guests migrate.
	ReasonProviderNotMigratable = "ProviderNotMigratable"
	// ReasonDiskNotMigratable: a disk cannot be carried to another node (a claim).
	ReasonDiskNotMigratable = "DiskNotMigratable"
	// ReasonFilesystemNotMigratable: the running guest has virtio-fs shares, whose daemons'
	// state (the guest's open files) virtpod does not carry to another node.
	ReasonFilesystemNotMigratable = "FilesystemNotMigratable"
	// ReasonGuestResized: the guest was resized live since it started; its hotplugged CPUs and
	// memory are not rebuilt on a target. It can migrate after its next start.
	ReasonGuestResized = "GuestResized"
)

// VirtualMachineMigration condition Completed: False while the migration runs (InProgress) or
// after it failed (the cause), True once the guest runs on the target.
const (
	ConditionCompleted = "Completed"

	ReasonInProgress = "InProgress"
	// ReasonSucceeded: the guest runs on the target pod; the source pod is deleted.
	ReasonSucceeded = "Succeeded"
	// ReasonVMNotFound: no VirtualMachine of spec.vmName in the namespace.
	ReasonVMNotFound = "VMNotFound"
	// ReasonVMDeleted: the VM was deleted (or its guest stopped) during the migration.
	ReasonVMDeleted = "VMDeleted"
	// ReasonNotMigratable: the VM cannot migrate; the message is its Migratable condition's.
	ReasonNotMigratable = "NotMigratable"
	// ReasonAlreadyMigrating: another migration of the VM is in progress.
	ReasonAlreadyMigrating = "AlreadyMigrating"
	// ReasonTargetUnschedulable: the scheduler could not place the target pod (its words).
	ReasonTargetUnschedulable = "TargetUnschedulable"
	// ReasonTargetFailed: the target pod ended or was deleted before the guest ran there.
	ReasonTargetFailed = "TargetFailed"
	// ReasonSourceFailed: the source pod ended or was deleted during the migration.
	ReasonSourceFailed = "SourceFailed"
	// ReasonStreamBroken: QEMU's transfer failed (its words); the guest keeps running on the source.
	ReasonStreamBroken = "StreamBroken"
	// ReasonTimeout: spec.completionTimeoutSeconds passed; the transfer is cancelled.
	ReasonTimeout = "Timeout"
	// ReasonCancelled: the migration was deleted before it ended; the transfer is cancelled.
	ReasonCancelled = "Cancelled"
)

// VirtualMachineSnapshot and VirtualMachineRestore condition Ready: False while the copy is
// made (InProgress) or after it failed (the cause), True once the snapshot can be restored, or
// the restored VM names its claims. ReasonVMNotFound and ReasonTimeout are shared with
// migrations.
const (
	// ReasonVMBusy: the VM is neither running nor stopped (starting, stopping,
	// migrating, suspended); the snapshot starts once it is one or the other.
	ReasonVMBusy = "VMBusy"
	// ReasonNothingToCopy: the VM has no writable disk on a claim (root disk or data disk).
	ReasonNothingToCopy = "NothingToCopy"
	// ReasonClaimRefused: the API server refused a claim the copy needs (its words: a quota, a
	// StorageClass it does not know), or a disk's claim is not a usable Filesystem claim.
	ReasonClaimRefused = "ClaimRefused"
	// ReasonCopyFailed: the copier pod or the guest's QEMU failed the copy (their words).
	ReasonCopyFailed = "CopyFailed"
	// ReasonSourceGone: the running guest's runner pod ended during the copy.
	ReasonSourceGone = "SourceGone"
	// ReasonReady: the snapshot is complete, or the restored VM names its claims.
	ReasonReady = "Ready"
	// ReasonSnapshotNotReady: the restore's snapshot does not exist or has not Succeeded.
	ReasonSnapshotNotReady = "SnapshotNotReady"
	// ReasonVMRunning: a restore in place needs the VM stopped (runStrategy: Halted, no pod).
	ReasonVMRunning = "VMRunning"
	// ReasonVMExists: a clone's VM name is taken by a VM that is not the snapshot's.
	ReasonVMExists = "VMExists"
)

// ProviderClass condition types.
const (
	// ConditionEnabled is True unless an admin disabled the class.
	ConditionEnabled = "Enabled"
	// ConditionAvailable is True when at least one node can run the class's VMs now.
	ConditionAvailable = "Available"
)

// ProviderClass reasons of Enabled and Available.
const (
	ReasonEnabled         = "Enabled"
	ReasonDisabledByAdmin = "DisabledByAdmin"
	ReasonNodesReady      = "NodesReady"
	ReasonNoNodes         = "NoNodes"
	ReasonNoReadyNodes    = "NoReadyNodes"
)

// VirtualMachine condition AgentConnected: whether qemu-guest-agent answers in the running
// guest (status.guest then has what it said). Only on running VMs.
const (
	ConditionAgentConnected = "AgentConnected"

	// ReasonAgentConnected: the guest's agent answers.
	ReasonAgentConnected = "AgentConnected"
	// ReasonAgentNotConnected: nothing answers on the channel: the guest has no
	// qemu-guest-agent running (yet). Install and start it in the guest.
	ReasonAgentNotConnected = "AgentNotConnected"
	// ReasonAgentNotSupported: the guest has no agent channel: provider cloud-hypervisor, or
	// a runner pod started before the channel existed (it has one from its next start).
	ReasonAgentNotSupported = "AgentNotSupported"
)

// VirtualMachine condition Suspended: where a suspend or a resume stands. True while the guest's
// state is saved and no guest runs; False while a suspend or a resume is under way, or when one
// cannot be done (the reason says why, the message names the fix). Absent when neither is asked
// for nor saved.
const (
	ConditionSuspended = "Suspended"

	// ReasonSuspended: the guest's state is saved on its state claim; no runner pod holds CPU or
	// memory. Set spec.suspend false (vmctl resume) to continue it.
	ReasonSuspended = "Suspended"
	// ReasonSuspending: the runner is saving the guest's state.
	ReasonSuspending = "Suspending"
	// ReasonSuspendFailed: the runner refused or failed the suspend (its words); the guest runs
	// on, and the node agent retries.
	ReasonSuspendFailed = "SuspendFailed"
	// ReasonNotSuspendable: spec.suspend is true but the guest cannot be suspended now: its
	// runner pod was started without the state claim, or no guest runs and none is saved.
	ReasonNotSuspendable = "NotSuspendable"
	// ReasonResuming: a runner pod is loading the saved state.
	ReasonResuming = "Resuming"
	// ReasonResumeFailed: the last runner could not load the saved state (its words); the state
	// is kept, and the next start tries again. A run request (vmctl restart) discards it.
	ReasonResumeFailed = "ResumeFailed"
)

// ReasonStateClaimUnfit holds a VM whose state claim cannot keep its state (a Block claim, or
// one smaller than the guest's memory plus StateOverheadMiB); DisksReady says so.
const ReasonStateClaimUnfit = "StateClaimUnfit"
