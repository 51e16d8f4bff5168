package imagemap_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/imagemap"
)

const digest = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestBadLinesAreReportedAndGoodOnesKept: every bad line is named with its line number and the
// reason; the good lines around them still map.
func TestBadLinesAreReportedAndGoodOnesKept(t *testing.T) {
	text := strings.Join([]string{
		"# the dev loop's map", // 1
		"localhost/virtpod/runner localhost/virtpod/runner:tilt-1",              // 2 good: repository
		"registry.example.com/vm/kernel:6.1 localhost/vm/kernel:dev   # pinned", // 3 good: exact
		"justone",                           // 4 one field
		"a b c",                             // 5 three fields
		"Bad/Upper:1 localhost/x:1",         // 6 FROM not a reference
		"localhost/y:1 http://x/y:1",        // 7 TO not a reference
		"localhost/z localhost/z2",          // 8 TO not pinned
		"localhost/same:1 localhost/same:1", // 9 to itself
		"localhost/virtpod/runner localhost/virtpod/runner:tilt-2",   // 10 duplicate FROM
		"localhost/a:1 localhost/b:1",                                // 11 cycle a → b → a
		"localhost/b:1 localhost/a:1",                                // 12 cycle
		"localhost/c localhost/d:1",                                  // 13 cycle c → d → c (repositories)
		"localhost/d localhost/c:7",                                  // 14 cycle
		"localhost/ok" + digest + " localhost/ok:2",                  // 15 good: digest exact
		"localhost/e:1 localhost/f:1:2",                              // 16 TO not a reference
		"localhost/g:" + strings.Repeat("t", 129) + " localhost/g:1", // 17 tag too long
		"",                                    // 18 blank
		"localhost/disk:v1 localhost/disk:v2", // 19 good
	}, "\n")
	m, problems := imagemap.Parse(text)
	want := map[int]string{
		4: "want two image references", 5: "want two image references",
		6: "FROM \"Bad/Upper:1\" is not an image reference", 7: "TO \"http://x/y:1\" is not an image reference",
		8: "names no tag or digest", 9: "maps an image to itself", 10: "already mapped on line 2",
		11: "part of a cycle", 12: "part of a cycle", 13: "part of a cycle", 14: "part of a cycle",
		16: "is not an image reference", 17: "is not an image reference",
	}
	if len(problems) != len(want) {
		t.Errorf("%d problems, want %d: %v", len(problems), len(want), problems)
	}
	for _, p := range problems {
		if w, ok := want[p.Line]; !ok || !strings.Contains(p.Reason, w) {
			t.Errorf("line %d: got %q, want a reason containing %q", p.Line, p.Reason, w)
		}
		if !strings.Contains(p.String(), "line ") {
			t.Errorf("problem text does not name its line: %s", p)
		}
	}
	if m.Len() != 4 {
		t.Errorf("%d mappings in effect, want the 4 good lines", m.Len())
	}
	for from, to := range map[string]string{
		"localhost/virtpod/runner:dev":       "localhost/virtpod/runner:tilt-1", // any tag of the repository
		"localhost/virtpod/runner" + digest:  "localhost/virtpod/runner:tilt-1", // and a digest
		"localhost/virtpod/runner:tilt-1":    "localhost/virtpod/runner:tilt-1", // applied once, no loop
		"registry.example.com/vm/kernel:6.1": "localhost/vm/kernel:dev",
		"registry.example.com/vm/kernel:6.2": "registry.example.com/vm/kernel:6.2", // exact only
		"localhost/ok" + digest:              "localhost/ok:2",
		"localhost/disk:v1":                  "localhost/disk:v2",
		"localhost/a:1":                      "localhost/a:1", // cyclic lines are out
		"localhost/other:1":                  "localhost/other:1",
	} {
		if got := m.Resolve(from); got != to {
			t.Errorf("Resolve(%s) = %s, want %s", from, got, to)
		}
	}
}

func TestEmptyMapMapsNothing(t *testing.T) {
	var m imagemap.Map
	if got := m.Resolve("localhost/x:1"); got != "localhost/x:1" || m.Len() != 0 {
		t.Fatalf("zero map resolved to %s", got)
	}
	m, problems := imagemap.Parse("  # nothing\n\n")
	if m.Len() != 0 || len(problems) != 0 {
		t.Fatalf("comment-only map: %d mappings, %v", m.Len(), problems)
	}
}

func TestRepository(t *testing.T) {
	for in, want := range map[string]string{
		"localhost:5000/a/b:1":   "localhost:5000/a/b",
		"localhost:5000/a/b":     "localhost:5000/a/b",
		"a" + digest:             "a",
		"a:1" + digest:           "a",
		"registry.example.com/x": "registry.example.com/x",
	} {
		if got := imagemap.Repository(in); got != want {
			t.Errorf("Repository(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestPatternMatchesCRD keeps the Go check and the CRD's CEL rule the same expression.
func TestPatternMatchesCRD(t *testing.T) {
	crd, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "vm.virtpod.io_virtualmachines.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	escaped := strings.ReplaceAll(imagemap.ReferencePattern, `\`, `\\`)
	if n := strings.Count(string(crd), "self.matches('"+escaped+"')"); n != 3 {
		t.Fatalf("the CRD uses the reference pattern %d times, want 3 (runnerImage, kernelImage, rootDisk.image)", n)
	}
}
