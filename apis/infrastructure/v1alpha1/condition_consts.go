package v1alpha1

// Condition types and reasons of VirtPodCluster and VirtPodMachine, in one place so that users,
// tools and other controllers can import them. Each reason is named after its value. docs/api.md
// has a table of every one, kept complete by apis/conditions_doc_test.go.

// Condition types. Ready summarises each kind for Cluster API, which mirrors it into the owning
// Cluster's or Machine's InfrastructureReady condition.
const (
	ReadyCondition  = "Ready"
	PausedCondition = "Paused"
	// ControlPlaneServiceReadyCondition: the control-plane Service exists and matches the
	// template, or none is needed because the cluster is managed by someone else.
	ControlPlaneServiceReadyCondition = "ControlPlaneServiceReady"
	// ControlPlaneEndpointReadyCondition: spec.controlPlaneEndpoint holds a valid host and port
	// that the Cluster can rely on.
	ControlPlaneEndpointReadyCondition = "ControlPlaneEndpointReady"
	// VirtualMachineReadyCondition: the machine's VirtualMachine exists and runs.
	VirtualMachineReadyCondition = "VirtualMachineReady"
)

// Reasons of both kinds: Paused, and Ready before Cluster API has made an owner.
const (
	ReasonPaused          = "Paused"
	ReasonNotPaused       = "NotPaused"
	ReasonWaitingForOwner = "WaitingForOwner"
)

// VirtPodCluster reasons of ControlPlaneServiceReady, ControlPlaneEndpointReady and Ready.
const (
	ReasonServiceReady    = "ServiceReady"
	ReasonServiceNotReady = "ServiceNotReady"
	// ReasonServiceNameTaken: a Service that is not the VirtPodCluster's holds the
	// control-plane Service's name; virtpod leaves it alone.
	ReasonServiceNameTaken = "ServiceNameTaken"
	// ReasonExternallyManaged: the cluster.x-k8s.io/managed-by annotation is set; no Service.
	ReasonExternallyManaged   = "ExternallyManaged"
	ReasonEndpointFromService = "EndpointFromService"
	// ReasonEndpointSetExternally: someone else set the endpoint before virtpod published one.
	ReasonEndpointSetExternally = "EndpointSetExternally"
	// ReasonEndpointOverwritten: someone else replaced the endpoint virtpod published while
	// virtpod manages the Service; the Cluster keeps the first one.
	ReasonEndpointOverwritten        = "EndpointOverwritten"
	ReasonWaitingForExternalEndpoint = "WaitingForExternalEndpoint"
	ReasonProvisioned                = "Provisioned"
)

// VirtPodMachine reasons of VirtualMachineReady and Ready.
const (
	ReasonWaitingForClusterInfrastructure = "WaitingForClusterInfrastructure"
	ReasonWaitingForBootstrapData         = "WaitingForBootstrapData"
	// ReasonVirtualMachineNameTaken: a VirtualMachine that is not the machine's holds its name.
	ReasonVirtualMachineNameTaken = "VirtualMachineNameTaken"
	// ReasonInvalidVirtualMachine: the API server refused the VirtualMachine built from
	// spec.virtualMachine.
	ReasonInvalidVirtualMachine = "InvalidVirtualMachine"
	ReasonVirtualMachineRunning = "VirtualMachineRunning"
	// The VirtualMachine's phase while it does not run: VirtualMachine<phase>.
	ReasonVirtualMachinePending    = "VirtualMachinePending"
	ReasonVirtualMachineScheduling = "VirtualMachineScheduling"
	ReasonVirtualMachineStarting   = "VirtualMachineStarting"
	ReasonVirtualMachineStopping   = "VirtualMachineStopping"
	ReasonVirtualMachineStopped    = "VirtualMachineStopped"
	ReasonVirtualMachineSucceeded  = "VirtualMachineSucceeded"
	ReasonVirtualMachineFailed     = "VirtualMachineFailed"
	ReasonVirtualMachineSuspended  = "VirtualMachineSuspended"
	// ReasonDeleting: the VirtPodMachine waits for its VirtualMachine and runner pod to go.
	ReasonDeleting = "Deleting"
)

// VirtPodMachine condition BootstrapSucceeded: whether the guest's bootstrap (kubeadm init or
// join, run by cloud-init) succeeded, read through the guest's qemu-guest-agent without SSH:
// Cluster API's bootstrap providers write /run/cluster-api/bootstrap-success.complete when it
// did, and cloud-init's result says when it ended. It tells a broken join from a slow boot.
const (
	BootstrapSucceededCondition = "BootstrapSucceeded"

	// ReasonBootstrapSucceeded: the sentinel is there.
	ReasonBootstrapSucceeded = "BootstrapSucceeded"
	// ReasonBootstrapFailed: cloud-init ended without the sentinel; the message has its errors.
	ReasonBootstrapFailed = "BootstrapFailed"
	// ReasonBootstrapInProgress: the agent answers and cloud-init has not ended yet.
	ReasonBootstrapInProgress = "BootstrapInProgress"
	// ReasonBootstrapUnknown (status Unknown): no guest runs, or its agent does not answer, so
	// nothing can be read; the message says which.
	ReasonBootstrapUnknown = "BootstrapUnknown"
)
