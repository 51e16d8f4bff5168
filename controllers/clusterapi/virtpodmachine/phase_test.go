package virtpodmachine

import (
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestEveryPhaseHasAReason: a VM phase without a reason would make VirtualMachineReady's reason
// empty, which the API server refuses, so no status would be written at all.
func TestEveryPhaseHasAReason(t *testing.T) {
	for _, p := range []vmv1.Phase{vmv1.PhasePending, vmv1.PhaseScheduling, vmv1.PhaseStarting, vmv1.PhaseRunning,
		vmv1.PhaseStopping, vmv1.PhaseStopped, vmv1.PhaseSuspended, vmv1.PhaseSucceeded, vmv1.PhaseFailed} {
		if phaseReasons[p] != "VirtualMachine"+string(p) {
			t.Errorf("phase %s: reason %q, want VirtualMachine%s", p, phaseReasons[p], p)
		}
	}
}
