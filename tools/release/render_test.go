package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/virtpod/virtpod/tools/imagebuild/push"
	"github.com/virtpod/virtpod/tools/release/pinned"
)

const (
	controllerDigest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	runnerDigest     = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

func testLock() push.Lock {
	return push.Lock{
		"virtpod/controller": {Source: "localhost/virtpod/controller:dev", Tag: "reg.example:5000/virtpod/controller:v0.1.0",
			Digest: "reg.example:5000/virtpod/controller@" + controllerDigest},
		"virtpod/runner": {Source: "localhost/virtpod/runner:dev", Tag: "reg.example:5000/virtpod/runner:v0.1.0",
			Digest: "reg.example:5000/virtpod/runner@" + runnerDigest},
	}
}

// TestRenderPinsEveryImage: both manifests a release ships name every image — the
// controller, the agent and device plugin (runner image), the controller's default runner —
// by the pushed digest, and nothing by tag alone.
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
