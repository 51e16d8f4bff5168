package kubeapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AdmissionObjects are the admission policies and bindings config/admission ships, in file and
// document order.
func AdmissionObjects() ([]*unstructured.Unstructured, error) {
	files, err := filepath.Glob(filepath.Join(Root(), "config", "admission", "*-policy.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var objs []*unstructured.Unstructured
	for _, f := range files {
		o, err := ReadObjects(f)
		if err != nil {
			return nil, err
		}
		objs = append(objs, o...)
	}
	if len(objs) == 0 {
		return nil, errors.New("config/admission holds no policies")
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

// InstallAdmission creates config/admission's policies and bindings as shipped, and returns a
// function that deletes them again.
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
