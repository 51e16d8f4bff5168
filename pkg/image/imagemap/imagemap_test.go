package imagemap_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/image/imagemap"
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
	checkProblems(t, problems, want)
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

// checkProblems: exactly the lines of want are reported, each with a reason containing its
// text, and each problem's text names its line.
func checkProblems(t *testing.T, problems []imagemap.Problem, want map[int]string) {
	t.Helper()
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
	crd, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "crd", "bases", "vm.virtpod.io_virtualmachines.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	escaped := strings.ReplaceAll(imagemap.ReferencePattern, `\`, `\\`)
	if n := strings.Count(string(crd), "self.matches('"+escaped+"')"); n != 4 {
		t.Fatalf("the CRD uses the reference pattern %d times, want 4 (runnerImage, kernelImage, rootDisk.image, disks[].image.ref)", n)
	}
}

// TestNormalisedSpellings: a line matches every spelling of its image a runtime would pull the
// same way — docker.io/library and index.docker.io, a missing tag as :latest, a tag beside a
// digest — in FROM and in what is resolved, and nothing else.
func TestNormalisedSpellings(t *testing.T) {
	m, problems := imagemap.Parse(strings.Join([]string{
		"busybox docker.io/library/busybox:1.36",                                  // repository, short spelling
		"docker.io/library/alpine:3.20 localhost/alpine:dev",                      // exact, long spelling
		"docker.io/library/redis:latest localhost/redis:dev",                      // exact :latest
		"registry.example.com/vm/kernel" + digest + " localhost/k:dev",            // exact digest
		"index.docker.io/library/nginx localhost/nginx:dev",                       // repository, longest spelling
		"registry.example.com:5000/vm/disk registry.example.com:5000/vm/disk:dev", // port kept
	}, "\n"))
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	for from, to := range map[string]string{
		"busybox":                                  "docker.io/library/busybox:1.36",
		"busybox:latest":                           "docker.io/library/busybox:1.36",
		"docker.io/library/busybox:latest":         "docker.io/library/busybox:1.36",
		"docker.io/busybox":                        "docker.io/library/busybox:1.36",
		"library/busybox:1.0":                      "docker.io/library/busybox:1.36",
		"index.docker.io/library/busybox" + digest: "docker.io/library/busybox:1.36",
		"alpine:3.20":                              "localhost/alpine:dev",
		"index.docker.io/library/alpine:3.20":      "localhost/alpine:dev",
		"alpine":                                   "alpine", // :latest, not :3.20
		"alpine:3.21":                              "alpine:3.21",
		"redis":                                    "localhost/redis:dev", // no tag is :latest
		"docker.io/redis":                          "localhost/redis:dev",
		"redis:7":                                  "redis:7",
		"registry.example.com/vm/kernel:6.1" + digest: "localhost/k:dev", // the digest decides
		"registry.example.com/vm/kernel:6.1":          "registry.example.com/vm/kernel:6.1",
		"nginx:1.27":                                  "localhost/nginx:dev",
		"docker.io/library/nginx" + digest:            "localhost/nginx:dev",
		"registry.example.com:5000/vm/disk:v1":        "registry.example.com:5000/vm/disk:dev",
		"registry.example.com/vm/disk:v1":             "registry.example.com/vm/disk:v1", // another registry
		"localhost/busybox":                           "localhost/busybox",
		"docker.io/other/busybox":                     "docker.io/other/busybox",
		"quay.io/library/busybox":                     "quay.io/library/busybox",
	} {
		if got := m.Resolve(from); got != to {
			t.Errorf("Resolve(%s) = %s, want %s", from, got, to)
		}
	}
}

// TestNormalisedProblems: duplicates, self-maps and cycles are found across spellings too.
func TestNormalisedProblems(t *testing.T) {
	_, problems := imagemap.Parse(strings.Join([]string{
		"busybox localhost/b:1",                            // 1 kept
		"docker.io/library/busybox localhost/b:2",          // 2 the same FROM as line 1
		"busybox:1 docker.io/library/busybox:1",            // 3 to itself
		"alpine:1 docker.io/library/redis:1",               // 4 cycle alpine → redis → alpine
		"index.docker.io/library/redis:1 library/alpine:1", // 5
		"localhost/c localhost/c:1",                        // 6 kept: a repository to a tag of itself
	}, "\n"))
	want := map[int]string{
		2: `FROM "docker.io/library/busybox" is already mapped on line 1, spelled "busybox"`,
		3: "maps an image to itself",
		4: "part of a cycle", 5: "part of a cycle",
	}
	checkProblems(t, problems, want)
}
