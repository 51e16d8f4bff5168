package migration

import (
	"fmt"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Transition is one move of a migration's phase and what makes it.
type Transition struct {
	From, To vmv1.MigrationPhase
	Event    string
}

// Transitions are all the moves of a migration's phase the controller makes; docs/migration.md's
// table under "## Live migration" is this one (TestPhaseTableDocumented). A migration without a
// phase is Pending. Staying in a phase (progress, messages) is no transition.
var Transitions = []Transition{
	{vmv1.MigrationPending, vmv1.MigrationScheduling, "the source pod is marked and the target pod is created"},
	{vmv1.MigrationPending, vmv1.MigrationFailed, "the VM cannot move (no VM, VM deleted, not migratable, already migrating)"},
	{vmv1.MigrationScheduling, vmv1.MigrationRunning, "the target's agent listens: the source is told where to send"},
	// One reconcile may see the receiver and the running target at once.
	{vmv1.MigrationScheduling, vmv1.MigrationSucceeded, "the guest runs on the target before a reconcile saw the transfer"},
	{vmv1.MigrationScheduling, vmv1.MigrationFailed, "the target pod is refused, unschedulable or ends; the source ends; the VM or the migration is deleted; the deadline passes"},
	{vmv1.MigrationRunning, vmv1.MigrationSucceeded, "the guest runs on the target and the VM's status names it"},
	{vmv1.MigrationRunning, vmv1.MigrationFailed, "the transfer fails; a pod ends; the VM or the migration is deleted; the deadline passes"},
}

// phaseOf reads an unset phase as Pending, as the reconciler does.
func phaseOf(m *vmv1.VirtualMachineMigration) vmv1.MigrationPhase {
	if m.Status.Phase == "" {
		return vmv1.MigrationPending
	}
	return m.Status.Phase
}

// checkTransition refuses a status write that moves the phase other than Transitions allow:
// a terminal migration never starts again, and none skips back.
func checkTransition(was, next *vmv1.VirtualMachineMigration) error {
	from, to := phaseOf(was), phaseOf(next)
	if from == to {
		return nil
	}
	for _, t := range Transitions {
		if t.From == from && t.To == to {
			return nil
		}
	}
	return fmt.Errorf("VirtualMachineMigration %s/%s: no transition from phase %s to %s", was.Namespace, was.Name, from, to)
}
