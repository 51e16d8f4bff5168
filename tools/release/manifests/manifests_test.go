package manifests

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// notShipped are the YAML files under config/ that no release carries, each on purpose. A file
// is shipped when a kustomization the release renders reads it or the release copies it.
var notShipped = map[string]string{
	// The local cluster's installs from source (the Tilt loop) and its settings, which
	// tools/dev/install-release.sh lays over a release's install.yaml.
	"config/local/kustomization.yaml":          "local cluster, from source",
	"config/local-capi/kustomization.yaml":     "local cluster, from source, with Cluster API",
	"config/local-settings/kustomization.yaml": "local cluster's settings over a release",
	// Example VMs for users to apply (docs), not part of an install.
	"config/samples/kustomization.yaml":              "sample VMs",
	"config/samples/vm_v1alpha1_virtualmachine.yaml": "sample VM",
	"config/samples/configmap.yaml":                  "the sample VM's shared ConfigMap",
	"config/samples/debian/kustomization.yaml":       "sample Debian VM",
	"config/samples/debian/vm.yaml":                  "sample Debian VM",
	"config/samples/debian/user-data.yaml":           "sample Debian VM's cloud-init",
	// Only where Kamaji runs the control plane, applied by hand (docs/kamaji.md): the binding
	// names Kamaji's service account, which each install of Kamaji may name differently.
	"config/kamaji/kustomization.yaml": "Kamaji's access, applied by hand",
	"config/kamaji/role.yaml":          "Kamaji's access, applied by hand",
	"config/kamaji/role_binding.yaml":  "Kamaji's access, applied by hand",
	// For kubectl apply -k config/prometheus; the release copies prometheusrule.yaml itself.
	"config/prometheus/kustomization.yaml": "kubectl apply -k for the example alerts",
}

// TestEveryManifestShipped: every YAML file under config/ reaches a release (a kustomization
// the release renders reads it, or the release copies it) or is listed in notShipped. A policy
// file left out of its kustomization once reached the tests, which read config/ directly, and
// no release.
func TestEveryManifestShipped(t *testing.T) {
	root := repoRoot(t)
	shipped := shippedFiles(t, root)
	for _, f := range yamlUnder(t, root, "config") {
		_, skipped := notShipped[f]
		switch {
		case shipped[f] && skipped:
			t.Errorf("%s is shipped but listed in notShipped: remove it from notShipped (tools/release/manifests)", f)
		case !shipped[f] && !skipped:
			t.Errorf("%s reaches no release: list it in the kustomization.yaml of its folder (and that folder in config/default or config/capi), or, if no release should carry it, in notShipped (tools/release/manifests/manifests_test.go) with why", f)
		}
	}
	for f := range notShipped {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("notShipped lists %s, which does not exist: remove it", f)
		}
	}
}

// shippedFiles are the files, relative to root, that the release's kustomizations read or
// that it copies.
func shippedFiles(t *testing.T, root string) map[string]bool {
	t.Helper()
	rec := &recordingFS{FileSystem: filesys.MakeFsOnDisk(), read: map[string]bool{}}
	for _, m := range Rendered {
		if _, err := kustomize(rec, root, m.Dir, nil); err != nil {
			t.Fatal(err)
		}
	}
	copies, err := CopiedFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	shipped := map[string]bool{}
	for _, f := range append(rec.files(), copies...) {
		if rel, err := filepath.Rel(root, f); err == nil && !strings.HasPrefix(rel, "..") {
			shipped[filepath.ToSlash(rel)] = true
		}
	}
	if len(shipped) < 20 {
		t.Fatalf("the release reads only %d files: %v", len(shipped), shipped)
	}
	return shipped
}

// recordingFS is the disk, remembering every file kustomize reads.
type recordingFS struct {
	filesys.FileSystem
	mu   sync.Mutex
	read map[string]bool
}

func (r *recordingFS) ReadFile(path string) ([]byte, error) {
	r.note(path)
	return r.FileSystem.ReadFile(path)
}

func (r *recordingFS) Open(path string) (filesys.File, error) {
	r.note(path)
	return r.FileSystem.Open(path)
}

func (r *recordingFS) note(path string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if abs, err := filepath.Abs(path); err == nil {
		r.read[abs] = true
	}
}

func (r *recordingFS) files() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for f := range r.read {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// yamlUnder are the YAML files under dir, relative to root.
func yamlUnder(t *testing.T, root, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !slices.Contains([]string{".yaml", ".yml"}, filepath.Ext(p)) {
			return err
		}
		rel, err := filepath.Rel(root, p)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("found only %d YAML files under %s", len(files), dir)
	}
	return files
}

// TestCopiedFilesRefusesAMissingFile: a file the release copies that moved is an error naming
// the pattern, not a release without it.
func TestCopiedFilesRefusesAMissingFile(t *testing.T) {
	_, err := CopiedFiles(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), Copied[0]) {
		t.Fatalf("CopiedFiles of an empty folder: %v", err)
	}
}

// TestAdmissionOfInstall: the admission objects of install.yaml's build are policies and
// bindings only, each policy bound by a binding of the same name.
func TestAdmissionOfInstall(t *testing.T) {
	rm, err := Kustomize(repoRoot(t), Install.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Admission(rm)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string][]string{}
	for _, o := range objs {
		kinds[o.GetName()] = append(kinds[o.GetName()], o.GetKind())
	}
	for name, ks := range kinds {
		sort.Strings(ks)
		if len(ks) != 2 || ks[1] != ks[0]+"Binding" {
			t.Errorf("%s: %v, want one policy and its binding", name, ks)
		}
	}
	if len(kinds) < 3 {
		t.Errorf("install.yaml's build has only %d admission policies: %v", len(kinds), kinds)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r, Install.Dir, "kustomization.yaml")); err != nil {
		t.Fatal(err)
	}
	return r
}
