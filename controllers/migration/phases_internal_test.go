package migration

import (
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestCheckTransition: the writes the table allows pass, staying in a phase passes, and every
// other move is refused.
func TestCheckTransition(t *testing.T) {
	mig := func(p vmv1.MigrationPhase) *vmv1.VirtualMachineMigration {
		m := &vmv1.VirtualMachineMigration{}
		m.Status.Phase = p
		return m
	}
	allowed := map[[2]vmv1.MigrationPhase]bool{}
	for _, tr := range Transitions {
		allowed[[2]vmv1.MigrationPhase{tr.From, tr.To}] = true
	}
	phases := []vmv1.MigrationPhase{"", vmv1.MigrationPending, vmv1.MigrationScheduling, vmv1.MigrationRunning, vmv1.MigrationSucceeded, vmv1.MigrationFailed}
	for _, from := range phases {
		for _, to := range phases {
			err := checkTransition(mig(from), mig(to))
			f, t2 := phaseOf(mig(from)), phaseOf(mig(to))
			want := f == t2 || allowed[[2]vmv1.MigrationPhase{f, t2}]
			if (err == nil) != want {
				t.Errorf("%q → %q: %v, want allowed %v", from, to, err, want)
			}
		}
	}
	for _, bad := range [][2]vmv1.MigrationPhase{{vmv1.MigrationFailed, vmv1.MigrationRunning}, {vmv1.MigrationSucceeded, vmv1.MigrationFailed}, {vmv1.MigrationRunning, vmv1.MigrationScheduling}, {vmv1.MigrationPending, vmv1.MigrationRunning}} {
		if checkTransition(mig(bad[0]), mig(bad[1])) == nil {
			t.Errorf("%s → %s allowed", bad[0], bad[1])
		}
	}
}
