// Package layout keeps the two sides apart: the controller (controllers/) renders runner pods
// and the node side — the runner in each pod (runner/) and the node agent (agent/) — acts in
// them, and what both need lives in apis/ or pkg/. A node
// binary that linked the controller's pod renderer, or a controller that linked node code, would
// let one side's change break the other unseen.
package layout

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/tests/kubeapi"
)

const module = "github.com/virtpod/virtpod/"

const sidesFix = "move what both sides need to apis/vm/v1alpha1 or a pkg/ package of its own"

// TestSidesStayApart: no package under runner/ or agent/ depends on pkg/podspec, none under
// controllers/ on anything under runner/ or agent/, the runner on none of the agent (it runs in
// a pod the agent serves, through the control socket only), and no hypervisor driver on package
// runner, directly or through another package; their tests
// import neither either (the tests' shared harness, tests/kubeapi, and harness packages such
// as podcontroltest that use it may: it starts the controller).
func TestSidesStayApart(t *testing.T) {
	for _, rule := range []struct {
		pkgs, forbidden string // forbidden: a package, or a folder when it ends in /
		fix             string
	}{
		{"./runner/...", module + "pkg/podspec", sidesFix},
		{"./agent/...", module + "pkg/podspec", sidesFix},
		{"./controllers/...", module + "runner/", sidesFix},
		{"./controllers/...", module + "agent/", sidesFix},
		{"./cmd/virtpod-runner/...", module + "agent/", "the runner binary carries no node-agent code: move what both need to pkg/"},
		// A driver is one hypervisor's code behind runner/hypervisor's interfaces: the runner
		// imports its drivers, never the reverse.
		{"./runner/hypervisor/...", module + "runner", "move what the runner and its drivers share to runner/hypervisor"},
		// The runner's root orchestrates; its packages (boot, podnet, live, status, console,
		// virtiofs) each do one job for it and never reach back.
		{"./runner/...", module + "runner", "the runner's packages serve run.go, never the reverse: move what they need into the package that owns it"},
		// The status board is what everyone reports to: it depends on none of them.
		{"./runner/status/...", module + "runner/", "runner/status depends on no other part of the runner: hand it what it shows (its Prober interface)"},
	} {
		cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}{{range .TestImports}} {{.}}{{end}}{{range .XTestImports}} {{.}}{{end}}`, rule.pkgs)
		cmd.Dir = kubeapi.Root()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", rule.pkgs, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			if strings.HasSuffix(f[0], "test") {
				continue // a test harness package (podcontroltest), which tests/kubeapi may pull in
			}
			for _, dep := range f[1:] {
				if f[0] == strings.TrimSuffix(rule.forbidden, "/") {
					continue // a package's own external tests import it
				}
				if dep == rule.forbidden || (strings.HasSuffix(rule.forbidden, "/") && strings.HasPrefix(dep, rule.forbidden)) {
					t.Errorf("%s depends on %s: %s", f[0], dep, rule.fix)
				}
			}
		}
	}
}

// wings are pkg/'s folders of one concern each (docs/layout.md#pkg-in-wings); they hold packages,
// never Go files of their own.
var wings = []string{"network", "disk", "image", "kernel", "clusterapi"}

// TestPkgWings: a package at the top of pkg/ is shared (two or more importers in the module) or a
// golden-tested builder (a testdata folder beside it); a one-caller helper goes into a wing or
// beside its caller, so pkg/'s top stays a short list of contracts and builders.
func TestPkgWings(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = kubeapi.Root()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	importers := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		for _, dep := range strings.Fields(line)[1:] {
			importers[dep]++
		}
	}
	entries, err := os.ReadDir(filepath.Join(kubeapi.Root(), "pkg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		dir := filepath.Join(kubeapi.Root(), "pkg", e.Name())
		if !e.IsDir() {
			t.Errorf("pkg/%s: a file at the top of pkg/; put it in a package", e.Name())
			continue
		}
		if slices.Contains(wings, e.Name()) {
			if goFiles, _ := filepath.Glob(filepath.Join(dir, "*.go")); len(goFiles) > 0 {
				t.Errorf("pkg/%s is a wing and holds Go files %v: move them into a package of the wing", e.Name(), goFiles)
			}
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "testdata")); err == nil {
			continue // a golden-tested builder
		}
		if n := importers[module+"pkg/"+e.Name()]; n < 2 {
			t.Errorf("pkg/%s has %d importer(s) and no golden files: move it into a wing (%s) or beside its caller",
				e.Name(), n, strings.Join(wings, ", "))
		}
	}
}
