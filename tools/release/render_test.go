package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/virtpod/virtpod/tools/imagebuild/push"
	"github.com/virtpod/virtpod/tools/release/manifests"
	"github.com/virtpod/virtpod/tools/release/pinned"
)

const (
	controllerDigest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	runnerDigest     = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	debian12Digest   = "sha256:3333333333333333333333333333333333333333333333333333333333333333"
)

func testLock() push.Lock {
	return push.Lock{
		"virtpod/controller": {Source: "localhost/virtpod/controller:dev", Tag: "reg.example:5000/virtpod/controller:v0.1.0",
			Digest: "reg.example:5000/virtpod/controller@" + controllerDigest},
		"virtpod/runner": {Source: "localhost/virtpod/runner:dev", Tag: "reg.example:5000/virtpod/runner:v0.1.0",
			Digest: "reg.example:5000/virtpod/runner@" + runnerDigest},
		"virtpod/runner-debian12": {Source: "localhost/virtpod/runner-debian12:dev", Tag: "reg.example:5000/virtpod/runner-debian12:v0.1.0",
			Digest: "reg.example:5000/virtpod/runner-debian12@" + debian12Digest},
	}
}

// TestRenderPinsEveryImage: both manifests a release ships name every image — the
// controller, the agent and device plugin (runner image), the controller's default runner, the
// QEMU 7.2 runner the qemu class allows — by the pushed digest, and nothing by tag alone.
func TestRenderPinsEveryImage(t *testing.T) {
	for _, dir := range []string{"config/default", "config/capi"} {
		t.Run(dir, func(t *testing.T) {
			out, err := render(root(t), dir, "v0.1.0", testLock())
			if err != nil {
				t.Fatal(err)
			}
			s := string(out)
			for _, want := range []string{
				"image: reg.example:5000/virtpod/controller@" + controllerDigest,
				"image: reg.example:5000/virtpod/runner@" + runnerDigest,
				"value: reg.example:5000/virtpod/runner@" + runnerDigest,
				"allowedRunnerImages:\n  - reg.example:5000/virtpod/runner-debian12@" + debian12Digest + "\n",
				"kind: CustomResourceDefinition", "kind: DaemonSet", "kind: ValidatingAdmissionPolicy",
				"app.kubernetes.io/version: v0.1.0",
			} {
				if !strings.Contains(s, want) {
					t.Errorf("%s rendered without %q", dir, want)
				}
			}
			if n := strings.Count(s, "image: reg.example:5000/virtpod/runner@"); n < 2 {
				t.Errorf("the runner image pinned %d times; want the agent and the device plugin", n)
			}
		})
	}
}

// installPolicies are the admission policies install.yaml carries (config/admission), each with
// a binding of its name.
var installPolicies = []string{
	"virtpod-runner-image", "virtpod-default-provider", "virtpod-agent-pods",
	"virtpod-runner-pods", "virtpod-vm-labels", "virtpod-agent-nodes", "virtpod-agent-secrets",
}

// shippedPolicies are the policies each rendered manifest carries, by the folder it is built
// from: infrastructure-components.yaml adds the Cluster API provider's.
var shippedPolicies = map[string][]string{
	"config/default":            installPolicies,
	"config/providers/qemu-7.2": nil, // a ProviderClass alone
	"config/capi":               append(slices.Clone(installPolicies), "virtpod-template-immutable"),
}

// TestRenderShipsEveryPolicy: both manifests a release renders carry every admission policy
// and its binding (config/admission's kustomization once left two of its five files out).
func TestRenderShipsEveryPolicy(t *testing.T) {
	for _, m := range manifests.Rendered {
		t.Run(m.File, func(t *testing.T) {
			want, ok := shippedPolicies[m.Dir]
			if !ok {
				t.Fatalf("shippedPolicies has no entry for %s: add the policies %s must carry", m.Dir, m.File)
			}
			out, err := render(root(t), m.Dir, "v0.1.0", testLock())
			if err != nil {
				t.Fatal(err)
			}
			got := admissionKinds(t, out)
			for _, name := range want {
				if k := got[name]; len(k) != 2 || k[1] != k[0]+"Binding" {
					t.Errorf("%s carries %v named %s, want a policy and its binding: list its file in config/admission/kustomization.yaml", m.File, k, name)
				}
			}
			for name := range got {
				if !slices.Contains(want, name) {
					t.Errorf("%s carries policy %s, which shippedPolicies does not name: add it there", m.File, name)
				}
			}
		})
	}
}

// admissionKinds are the kinds of the admission policies and bindings of a rendered stream, by
// name, sorted.
func admissionKinds(t *testing.T, stream []byte) map[string][]string {
	t.Helper()
	names := map[string][]string{}
	for _, o := range objects(t, stream) {
		if slices.Contains(manifests.AdmissionKinds, o.GetKind()) {
			names[o.GetName()] = append(names[o.GetName()], o.GetKind())
		}
	}
	for _, k := range names {
		slices.Sort(k)
	}
	return names
}

// objects are the objects of a YAML stream.
func objects(t *testing.T, stream []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	for {
		o := &unstructured.Unstructured{}
		if err := dec.Decode(&o.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatal(err)
		}
		if len(o.Object) > 0 {
			objs = append(objs, o)
		}
	}
}

// TestUnpinnedFindsTags: the check the release (and the test of shipped manifests) relies on
// finds every kind of unpinned reference in the unpinned sources.
func TestUnpinnedFindsTags(t *testing.T) {
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(root(t), "config/default"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Join(pinned.Unpinned(out), "\n")
	for _, want := range []string{"image: virtpod/controller:latest", "image: virtpod/runner:latest", "RUNNER_IMAGE=virtpod/runner:latest"} {
		if !strings.Contains(bad, want) {
			t.Errorf("Unpinned missed %q; found:\n%s", want, bad)
		}
	}
	if got := pinned.Unpinned([]byte("spec:\n  runnerImage: r/x:1\n---\nimage: r/x@sha256:00\n")); len(got) != 1 || got[0] != "runnerImage: r/x:1" {
		t.Errorf("Unpinned = %q", got)
	}
}

// TestRenderQEMU72Class: providerclass-qemu-7.2.yaml is the qemu class alone (the default one,
// so it replaces install.yaml's), on the QEMU 7.2 runner by digest, stating no virtio-fs, and
// allowing the default runner by digest.
func TestRenderQEMU72Class(t *testing.T) {
	out, err := render(root(t), manifests.QEMU72.Dir, "v0.1.0", testLock())
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, out)
	if len(objs) != 1 || objs[0].GetKind() != "ProviderClass" || objs[0].GetName() != "qemu" ||
		objs[0].GetAnnotations()["provider.virtpod.io/is-default-class"] != "true" {
		t.Fatalf("%s renders %d objects, want the default ProviderClass qemu alone: %s", manifests.QEMU72.File, len(objs), out)
	}
	spec := objs[0].Object["spec"].(map[string]any)
	if got := spec["runnerImage"]; got != "reg.example:5000/virtpod/runner-debian12@"+debian12Digest {
		t.Errorf("spec.runnerImage %v, want the QEMU 7.2 runner by digest", got)
	}
	if got := spec["allowedRunnerImages"]; !slices.Equal(anyStrings(got), []string{"reg.example:5000/virtpod/runner@" + runnerDigest}) {
		t.Errorf("spec.allowedRunnerImages %v, want the default runner by digest", got)
	}
	if got, ok := spec["runnerFeatures"]; !ok || len(anyStrings(got)) != 0 {
		t.Errorf("spec.runnerFeatures %v (set: %v), want [] stated: Debian 12 has no virtiofsd", got, ok)
	}
}

func anyStrings(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, e := range l {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}

func TestRenderRefusesIncompleteLock(t *testing.T) {
	l := testLock()
	delete(l, "virtpod/runner")
	if _, err := render(root(t), "config/default", "v0.1.0", l); err == nil || !strings.Contains(err.Error(), "no virtpod/runner") {
		t.Fatalf("render with no runner in the lock: %v", err)
	}
}

func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r, "config/default/kustomization.yaml")); err != nil {
		t.Fatal(err)
	}
	return r
}
