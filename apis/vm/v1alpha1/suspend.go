package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Suspend and resume of a whole guest (docs/api.md#suspend-and-resume): spec.suspend parks a
// running guest on spec.guest.stateClaim (its memory and devices; its disks are claims that keep
// themselves) and removes its runner pod; spec.suspend false again starts a runner that loads
// the state, and the guest continues where it stopped.
//
// The controller asks, the node agent carries it out, the runner ends: the controller sets
// AnnotationSuspend on the running pod; the node agent asks the runner (PUT /v1/suspend) and
// writes a failure into AnnotationSuspendError; the runner saves the state and ends with its
// MessageSuspended termination message, which is what status.suspendedState is written from.

// MessageSuspended, followed by the state's path, is the termination message of a runner that
// saved its guest and ended (exit code 0).
const MessageSuspended = "suspended: the guest's state is saved in "

// Pod annotations of a suspend.
const (
	// AnnotationSuspend on a runner pod asks its node agent to suspend the guest: set by the
	// controller while spec.suspend is true, removed when it is false again.
	AnnotationSuspend = "vm.virtpod.io/suspend"
	// AnnotationSuspendError is the runner's refusal or failure of the last suspend, in its
	// words, written by the node agent (the guest runs on; the agent retries with back-off).
	AnnotationSuspendError = "vm.virtpod.io/suspend-error"
)

// StateFile is where a runner pod keeps a suspended guest's state: on the state claim, mounted
// at StateMount.
const (
	StateMount = "/virtpod/state"
	StateFile  = StateMount + "/guest.state"
)

// StateOverheadMiB is what a state claim needs beyond the guest's memory (maxMemory when set): the
// devices' state and the stream's framing. A guest's saved state is at most its memory (pages
// it never touched cost next to nothing) plus a few MiB.
const StateOverheadMiB = 64

// StateClaim names the PersistentVolumeClaim a suspended guest's state is saved on.
type StateClaim struct {
	// claimName is a Filesystem PersistentVolumeClaim in the VM's namespace, of at least the
	// guest's memory (maxMemory when set) plus 64Mi. The runner pod mounts it from its start:
	// a change applies at the guest's next start. Like a disk's claim, one VM uses it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="spec.guest.stateClaim.claimName must be a PersistentVolumeClaim name (a DNS subdomain) such as web-state"
	ClaimName string `json:"claimName"`
}

// SuspendedState is a saved guest waiting on its state claim.
type SuspendedState struct {
	// claimName is the claim the state is on.
	ClaimName string `json:"claimName"`
	// savedAt is when the runner finished writing it.
	SavedAt metav1.Time `json:"savedAt"`
	// podName is the runner pod that saved it.
	// +optional
	PodName string `json:"podName,omitempty"`
	// node is where that pod ran.
	// +optional
	Node string `json:"node,omitempty"`
}
