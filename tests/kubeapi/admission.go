package kubeapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/virtpod/virtpod/tools/release/manifests"
)

// AdmissionObjects are the admission policies and bindings install.yaml ships, in the order
// it lists them: kustomize's build of the release's config/default (tools/release/manifests),
// never the policy files by name, so a policy the release leaves out is one the tests lack too.
func AdmissionObjects() ([]*unstructured.Unstructured, error) {
	releaseAdmission.once.Do(func() { releaseAdmission.objs, releaseAdmission.err = buildAdmission() })
	if releaseAdmission.err != nil {
		return nil, releaseAdmission.err
	}
	// Each caller gets its own copies: creating an object writes its uid and version into it.
	objs := make([]*unstructured.Unstructured, len(releaseAdmission.objs))
	for i, o := range releaseAdmission.objs {
		objs[i] = o.DeepCopy()
	}
	return objs, nil
}

// releaseAdmission is the release's build, made once per test binary: it renders every CRD too.
var releaseAdmission struct {
	once sync.Once
	objs []*unstructured.Unstructured
	err  error
}

func buildAdmission() ([]*unstructured.Unstructured, error) {
	m := manifests.Install
	rm, err := manifests.Kustomize(Root(), m.Dir, nil)
	if err != nil {
		return nil, fmt.Errorf("the release's %s: %w", m.File, err)
	}
	objs, err := manifests.Admission(rm)
	if err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("%s (the release's %s) builds no admission policy: list config/admission in %s/kustomization.yaml", m.Dir, m.File, m.Dir)
	}
	return objs, nil
}

// ReadObjects reads every object of a YAML file, a path relative to the repository's top
// folder or an absolute one.
func ReadObjects(path string) ([]*unstructured.Unstructured, error) {
	if !filepath.IsAbs(path) {
		path = filepath.Join(Root(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// InstallAdmission creates the admission policies and bindings install.yaml ships
// (AdmissionObjects), and returns a function that deletes them again.
func (e *Env) InstallAdmission(ctx context.Context) (func(), error) {
	objs, err := AdmissionObjects()
	if err != nil {
		return nil, err
	}
	remove := func() {
		for _, o := range objs {
			_ = e.Client.Delete(ctx, o)
		}
	}
	for _, o := range objs {
		if err := e.Client.Create(ctx, o); err != nil {
			remove()
			return nil, fmt.Errorf("create %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	if err := e.WaitMutationReady(ctx); err != nil {
		remove()
		return nil, err
	}
	return remove, nil
}

// WaitMutationReady waits until the API server can apply a MutatingAdmissionPolicy to
// VirtualMachines. It learns a new CRD's schema by polling its own OpenAPI every 5 s and, until
// then, refuses every create a mutation matches with 503 "Resource kind … not found", whatever
// the policy's failurePolicy: tests wait here instead of failing on the first create. A probe
// policy that annotates VMs carrying a probe label shows when mutations work.
func (e *Env) WaitMutationReady(ctx context.Context) error {
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
		"metadata": map[string]any{"name": "virtpod-test-probe"},
		"spec": map[string]any{
			"failurePolicy": "Fail", "reinvocationPolicy": "Never",
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{"vm.virtpod.io"}, "apiVersions": []any{"*"}, "operations": []any{"CREATE"}, "resources": []any{"virtualmachines"}}}},
			"matchConditions": []any{map[string]any{"name": "probe", "expression": "has(object.metadata.labels) && 'virtpod-test-probe' in object.metadata.labels"}},
			"mutations": []any{map[string]any{"patchType": "JSONPatch", "jsonPatch": map[string]any{
				"expression": `[JSONPatch{op: "add", path: "/metadata/annotations", value: {"virtpod-test-probe": "mutated"}}]`}}},
		},
	}}
	binding := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": "virtpod-test-probe"},
		"spec":     map[string]any{"policyName": "virtpod-test-probe"},
	}}
	for _, o := range []*unstructured.Unstructured{policy, binding} {
		if err := e.Client.Create(ctx, o); err != nil {
			return err
		}
		defer func() { _ = e.Client.Delete(ctx, o) }()
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		vm := SampleVM("default", "virtpod-test-probe")
		vm.Labels = map[string]string{"virtpod-test-probe": ""}
		err := e.Client.Create(ctx, vm, client.DryRunAll)
		if err == nil && vm.Annotations["virtpod-test-probe"] == "mutated" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API server applies no MutatingAdmissionPolicy to VirtualMachines after 60 s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
