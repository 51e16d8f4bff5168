package migration_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/migration"
)

// TestPhaseTableDocumented: docs/migration.md's table of phase transitions (before its first
// "## " section) is migration.Transitions, row for row, so neither can change without the other.
func TestPhaseTableDocumented(t *testing.T) {
	documented := parsePhaseTable(t, filepath.Join("..", "..", "docs", "migration.md"))
	code := map[string]string{}
	for _, tr := range migration.Transitions {
		row := "| `" + string(tr.From) + "` | `" + string(tr.To) + "` | " + tr.Event + " |"
		if _, dup := code[row]; dup {
			t.Errorf("migration.Transitions has %s → %s twice", tr.From, tr.To)
		}
		code[row] = string(tr.From) + " → " + string(tr.To)
		if _, ok := documented[row]; !ok {
			t.Errorf("migration.Transitions' %s is missing from docs/migration.md's table of phases; the row is:\n%s", code[row], row)
		}
	}
	for row, n := range documented {
		if _, ok := code[row]; !ok {
			t.Errorf("docs/migration.md:%d: %s is no transition of migration.Transitions (or its words differ)", n, row)
		}
	}
	if len(documented) == 0 {
		t.Errorf("docs/migration.md has no table | phase | next phase | when | before its first ## section")
	}
}

// TestPhasesKnown: the table moves only between the phases the API defines.
func TestPhasesKnown(t *testing.T) {
	known := map[vmv1.MigrationPhase]bool{vmv1.MigrationPending: true, vmv1.MigrationScheduling: true,
		vmv1.MigrationRunning: true, vmv1.MigrationSucceeded: true, vmv1.MigrationFailed: true}
	for _, tr := range migration.Transitions {
		if !known[tr.From] || !known[tr.To] || tr.From == tr.To || tr.Event == "" {
			t.Errorf("transition %q → %q (%q): want two different phases of the API and an event", tr.From, tr.To, tr.Event)
		}
		if tr.From == vmv1.MigrationSucceeded || tr.From == vmv1.MigrationFailed {
			t.Errorf("transition from terminal phase %s", tr.From)
		}
	}
}

// parsePhaseTable reads the rows of the table headed "| phase | next phase | when |" in the
// part of docs/migration.md before its first "## " section, each with its line number.
func parsePhaseTable(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	section, table := true, false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "## "):
			section, table = false, false
		case section && line == "| phase | next phase | when |":
			table = true
		case table && strings.HasPrefix(line, "| ---"):
		case table && strings.HasPrefix(line, "|"):
			if cells := strings.Split(strings.Trim(line, "|"), "|"); len(cells) != 3 {
				t.Errorf("docs/migration.md:%d: a row of %d cells, want phase | next phase | when", n, len(cells))
			}
			out[line] = n
		default:
			table = false
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
