package main

import (
	"fmt"
	"strings"

	"sigs.k8s.io/kustomize/api/resmap"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/virtpod/virtpod/tools/imagebuild/push"
	"github.com/virtpod/virtpod/tools/release/manifests"
	"github.com/virtpod/virtpod/tools/release/pinned"
)

// The images a release ships, by their path in the registry (and in config/, without a
// registry: virtpod/controller). config/capi names them docker.io/virtpod/... for clusterctl.
// virtpod/runner-debian12 is the QEMU 7.2 runner (providerclass-qemu-7.2.yaml).
var releaseImages = []string{"virtpod/controller", "virtpod/runner", "virtpod/runner-debian12"}

// render is the kustomization in dir (under the repository at root), built as the tests build
// it (manifests.Kustomize), with every image of the release pinned to its pushed digest: image
// fields, the controller's default runner image, and the runner images ProviderClasses name.
// Every object carries the release's version (app.kubernetes.io/version), so an upgrade is seen
// object by object; pod templates and selectors are left alone.
func render(root, dir, version string, lock push.Lock) ([]byte, error) {
	var images []map[string]string
	pins := map[string]push.Pushed{}
	for _, path := range releaseImages {
		p, ok := lock[path]
		if !ok {
			return nil, fmt.Errorf("the image lock has no %s: push its archive with imagebuild push --version", path)
		}
		repo, digest, ok := strings.Cut(p.Digest, "@")
		if !ok {
			return nil, fmt.Errorf("image lock: %s is not a reference by digest", p.Digest)
		}
		pins[path] = p
		for _, name := range []string{path, "docker.io/" + path} {
			images = append(images, map[string]string{"name": name, "newName": repo, "digest": digest})
		}
	}
	overlay := map[string]any{
		"images": images,
		"labels": []map[string]any{{"pairs": map[string]string{"app.kubernetes.io/version": version},
			"includeSelectors": false, "includeTemplates": false}},
		// The default runner image is a flag value, not an image field: set it by name (a
		// target, so a manifest without the controller, providerclass-qemu-7.2.yaml, builds).
		"patches": []map[string]any{{"target": map[string]string{"kind": "Deployment", "name": "virtpod-controller"}, "patch": fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: virtpod-controller, namespace: virtpod-system}
spec:
  template:
    spec:
      containers:
      - name: manager
        env:
        - {name: RUNNER_IMAGE, value: %q}
`, pins["virtpod/runner"].Digest)}},
	}
	rm, err := manifests.Kustomize(root, dir, overlay)
	if err != nil {
		return nil, err
	}
	if err := pinClasses(rm, pins); err != nil {
		return nil, err
	}
	out, err := rm.AsYaml()
	if err != nil {
		return nil, err
	}
	if bad := pinned.Unpinned(out); len(bad) > 0 {
		return nil, fmt.Errorf("%s still names images without a digest: %s", dir, strings.Join(bad, ", "))
	}
	return out, nil
}

// pinClasses pins the release's images where ProviderClasses name them (spec.runnerImage and
// spec.allowedRunnerImages are no image fields to kustomize): virtpod/runner-debian12 becomes
// REGISTRY/virtpod/runner-debian12@sha256:..., that image exactly.
func pinClasses(rm resmap.ResMap, pins map[string]push.Pushed) error {
	pin := func(n *kyaml.Node) {
		for path, p := range pins {
			if n.Value == path || n.Value == "docker.io/"+path {
				n.Value = p.Digest
			}
		}
	}
	for _, r := range rm.Resources() {
		if r.GetKind() != "ProviderClass" {
			continue
		}
		img, err := r.Pipe(kyaml.Lookup("spec", "runnerImage"))
		if err != nil {
			return err
		}
		if img != nil {
			pin(img.YNode())
		}
		allowed, err := r.Pipe(kyaml.Lookup("spec", "allowedRunnerImages"))
		if err != nil {
			return err
		}
		if allowed != nil {
			for _, n := range allowed.Content() {
				pin(n)
			}
		}
	}
	return nil
}
