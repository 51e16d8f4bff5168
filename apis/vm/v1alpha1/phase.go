package v1alpha1

// Phase is the VM's place in its life.
// +kubebuilder:validation:Enum=Pending;Scheduling;Starting;Running;Stopping;Stopped;Suspended;Succeeded;Failed
type Phase string

// Phases.
const (
	PhasePending    Phase = "Pending"    // no runner pod yet
	PhaseScheduling Phase = "Scheduling" // runner pod waits for a node
	PhaseStarting   Phase = "Starting"   // runner pod on a node, guest not yet running
	PhaseRunning    Phase = "Running"    // guest running
	PhaseStopping   Phase = "Stopping"   // guest shutting down
	PhaseStopped    Phase = "Stopped"    // runStrategy Halted: guest powered down, no runner pod
	PhaseSuspended  Phase = "Suspended"  // spec.suspend: the guest's state is saved on its claim, no runner pod
	PhaseSucceeded  Phase = "Succeeded"  // guest powered off and will not be restarted
	PhaseFailed     Phase = "Failed"     // guest or runner failed and will not be restarted
)

// EffectivePhase is the phase, or Pending for a VM the controller has not written a status for
// yet.
func (s *VirtualMachineStatus) EffectivePhase() Phase {
	if s.Phase == "" {
		return PhasePending
	}
	return s.Phase
}

// Stopped says the VM has no runner pod (status.podUID is empty once virtpod let go of its last
// one) and will not get one by itself: a snapshot copies such a VM's claims' files.
func (vm *VirtualMachine) Stopped() bool {
	if vm.Status.PodUID != "" {
		return false
	}
	switch vm.Status.Phase {
	case PhaseStopped, PhaseSucceeded, PhaseFailed:
		return true
	}
	return vm.Status.Phase == "" && vm.Spec.Halted()
}

// StoppedForRestore is a stopped VM that stays so (runStrategy Halted): what a restore in place
// needs.
func (vm *VirtualMachine) StoppedForRestore() bool { return vm.Spec.Halted() && vm.Stopped() }
