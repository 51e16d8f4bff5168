package v1alpha1_test

import (
	"context"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestSamplesAreValid renders the shipped samples (what make demo applies) with kustomize and
// creates them in the real API server, so a sample that drifts from the API fails here rather
// than in a user's first kubectl apply.
func TestSamplesAreValid(t *testing.T) {
	ctx := context.Background()
	for _, dir := range []string{"config/samples", "config/samples/debian"} {
		rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(kubeapi.Root(), dir))
		if err != nil {
			t.Fatalf("kustomize %s: %v", dir, err)
		}
		n := 0
		for _, r := range rm.Resources() {
			m, err := r.Map()
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{Object: m}
			u.SetNamespace("default")
			u.SetName(u.GetName() + "-sample")
			if err := env.Client.Create(ctx, u); err != nil {
				t.Errorf("%s: %s %s refused: %v", dir, u.GetKind(), u.GetName(), err)
			}
			if u.GetKind() == "VirtualMachine" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d VirtualMachines, want 1", dir, n)
		}
	}
}
