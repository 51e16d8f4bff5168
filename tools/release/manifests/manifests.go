// Package manifests says what a release ships from config/ and builds it: the kustomizations
// `make release` renders (in-process, with the kustomize Go API kubectl embeds) and the files it
// copies as they are. tools/release writes releases from it and the tests install and check the
// same builds (tests/kubeapi), so whatever the tests rely on is what the release carries.
package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Manifest is one file of a release rendered by kustomize.
type Manifest struct {
	File string // its name in the release folder
	Dir  string // the kustomization it is built from, relative to the repository
	What string // what it is, for the header of the file
}

var (
	// Install is install.yaml: everything virtpod needs, for kubectl apply.
	Install = Manifest{"install.yaml", "config/default",
		"kubectl apply --server-side -f install.yaml (apply twice on a new cluster: the second pass adds the ProviderClasses once their CRD is established)"}
	// Components is infrastructure-components.yaml: Install plus the Cluster API provider.
	Components = Manifest{"infrastructure-components.yaml", "config/capi",
		"the Cluster API infrastructure provider, for clusterctl init --infrastructure virtpod"}
	// QEMU72 is providerclass-qemu-7.2.yaml: the qemu class on the QEMU 7.2 runner, for clusters
	// that need QEMU 7.2, applied after install.yaml.
	QEMU72 = Manifest{"providerclass-qemu-7.2.yaml", "config/providers/qemu-7.2",
		"the qemu ProviderClass on the QEMU 7.2 runner (Debian 12, no virtio-fs): kubectl apply --server-side -f providerclass-qemu-7.2.yaml after install.yaml"}
	// Rendered are the manifests a release renders, in the order it writes them.
	Rendered = []Manifest{Install, Components, QEMU72}
)

// Copied are the files (globs, relative to the repository) a release carries as they are:
// clusterctl's metadata and templates, and the monitoring examples: the alerts, the scrape
// targets and the Grafana dashboard.
var Copied = []string{
	"config/clusterctl/templates/cluster-template*.yaml",
	"config/clusterctl/templates/clusterclass-*.yaml",
	"config/clusterctl/metadata.yaml",
	"config/prometheus/prometheusrule.yaml",
	"config/prometheus/podmonitors.yaml",
	"config/grafana/virtpod-dashboard.json",
}

// CopiedFiles are the files Copied names under root. A pattern that matches nothing is an
// error: a file renamed or moved would otherwise drop out of every release silently.
func CopiedFiles(root string) ([]string, error) {
	var files []string
	for _, pattern := range Copied {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return nil, err
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("%s matches no file: fix manifests.Copied (tools/release/manifests) where the file moved", pattern)
		}
		files = append(files, m...)
	}
	return files, nil
}

// Kustomize builds the kustomization dir (relative to the repository at root) with overlay, a
// kustomization's fields (images, labels, patches) laid over it; a nil overlay builds dir as
// it is.
func Kustomize(root, dir string, overlay map[string]any) (resmap.ResMap, error) {
	return kustomize(filesys.MakeFsOnDisk(), root, dir, overlay)
}

func kustomize(fs filesys.FileSystem, root, dir string, overlay map[string]any) (resmap.ResMap, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	target := filepath.Join(root, dir)
	if overlay != nil {
		tmp, err := os.MkdirTemp("", "virtpod-release-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		if err := writeOverlay(tmp, target, overlay); err != nil {
			return nil, err
		}
		target = tmp
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, target)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	return rm, nil
}

// writeOverlay writes into tmp a kustomization of base with overlay's fields.
func writeOverlay(tmp, base string, overlay map[string]any) error {
	// kustomize takes no absolute path to a base.
	rel, err := filepath.Rel(tmp, base)
	if err != nil {
		return err
	}
	k := map[string]any{"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
	for key, v := range overlay {
		k[key] = v
	}
	k["resources"] = []string{rel}
	body, err := yaml.Marshal(k)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), body, 0o644)
}

// AdmissionKinds are the kinds of admission policy objects a release ships.
var AdmissionKinds = []string{
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
	"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
}

// Admission are the admission policies and bindings of a build, in the order it lists them.
func Admission(rm resmap.ResMap) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		if !slices.Contains(AdmissionKinds, r.GetKind()) {
			continue
		}
		m, err := r.Map()
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", r.GetKind(), r.GetName(), err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs, nil
}
