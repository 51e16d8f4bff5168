package podspec

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// The runner's flags of a suspend and a resume (runnerconfig's --suspend-to and --resume-from).
const (
	SuspendFlag = "--suspend-to"
	ResumeFlag  = "--resume-from"
)

// Resumes says the VM's next runner pod loads its saved state instead of booting: a state is
// saved (status.suspendedState) on the state claim the spec still names.
func Resumes(vm *vmv1.VirtualMachine) bool {
	st, c := vm.Status.SuspendedState, vm.Spec.Guest.StateClaim
	return st != nil && c != nil && st.ClaimName == c.ClaimName
}

// CanSuspend says the runner pod was built to save its guest: its runner has --suspend-to (and
// the state claim mounted there).
func CanSuspend(pod *corev1.Pod) bool {
	_, ok := runnerpod.Value(pod, SuspendFlag)
	return ok
}

// ResumedFrom says the runner pod's guest was started from a saved state (--resume-from).
func ResumedFrom(pod *corev1.Pod) bool {
	_, ok := runnerpod.Value(pod, ResumeFlag)
	return ok
}

// withoutState takes the state claim and the suspend and resume flags out of a migration
// target's spec: the guest arrives by the migration, not from a state, and the state claim
// stays where it is (a second node may not attach it). The moved guest is suspendable again
// from its next start.
func withoutState(spec *corev1.PodSpec) {
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == stateClaimVolume })
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == stateClaimVolume })
	}
	if c := runnerpod.ContainerIn(spec); c != nil {
		c.Args = slices.DeleteFunc(c.Args, func(a string) bool {
			return strings.HasPrefix(a, SuspendFlag+"=") || strings.HasPrefix(a, ResumeFlag+"=")
		})
	}
}
