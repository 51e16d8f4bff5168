package capi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
	"github.com/virtpod/virtpod/tests/prereq"
)

// clusterctlRepo writes the local repository exactly as `make clusterctl-repo` does and returns
// the clusterctl configuration that points at it.
func clusterctlRepo(t *testing.T) (clusterctl, config string) {
	t.Helper()
	clusterctl, kubectl := os.Getenv("TEST_ASSET_CLUSTERCTL"), os.Getenv("KUBECTL")
	_, err1 := os.Stat(clusterctl)
	_, err2 := os.Stat(kubectl)
	prereq.Need(t, clusterctl != "" && kubectl != "" && err1 == nil && err2 == nil,
		"clusterctl ($TEST_ASSET_CLUSTERCTL, make capi) and kubectl ($KUBECTL, make k8s-binaries) are needed")
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(kubeapi.Root(), "tools", "dev", "clusterctl-repo.sh"), dir)
	cmd.Env = append(os.Environ(), "KUBECTL="+kubectl)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clusterctl-repo.sh: %v\n%s", err, out)
	}
	return clusterctl, filepath.Join(dir, "clusterctl.yaml")
}

func clusterctlRun(t *testing.T, bin string, env []string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(append(os.Environ(), "HOME="+cmd.Dir), env...) // no user clusterctl config
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("clusterctl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return decodeObjects(t, "clusterctl output", out)
}

// decodeObjects decodes the YAML (or JSON) documents of data; empty ones are left out.
func decodeObjects(t *testing.T, what string, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// TestClusterctlProvider reads virtpod's components through clusterctl from the local repository.
func TestClusterctlProvider(t *testing.T) {
	bin, config := clusterctlRepo(t)
	objs := clusterctlRun(t, bin, nil, "generate", "provider", "--infrastructure", "virtpod:v0.1.0", "--config", config)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		if o.GetLabels()["cluster.x-k8s.io/provider"] != "infrastructure-virtpod" {
			t.Errorf("%s %s lacks the provider label clusterctl adds", o.GetKind(), o.GetName())
		}
		if o.GetKind() == "CustomResourceDefinition" && strings.HasSuffix(o.GetName(), ".infrastructure.cluster.x-k8s.io") &&
			o.GetLabels()["cluster.x-k8s.io/v1beta2"] != "v1alpha1" {
			t.Errorf("CRD %s lacks the contract label", o.GetName())
		}
		if o.GetKind() == "Deployment" {
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			// --cluster-api=$(CLUSTER_API), its value set by name in env (config/manager).
			if raw, _ := json.Marshal(containers); !strings.Contains(string(raw), `"--cluster-api=$(CLUSTER_API)"`) ||
				!strings.Contains(string(raw), `{"name":"CLUSTER_API","value":"true"}`) {
				t.Errorf("controller Deployment does not run the provider (--cluster-api): %s", raw)
			}
		}
	}
	if kinds["CustomResourceDefinition"] != 10 || kinds["Deployment"] != 1 {
		t.Errorf("components: %v, want virtpod's 6 and the provider's 4 CRDs and the controller", kinds)
	}
}

// TestClusterctlTemplates renders both flavors and has the API server accept every object whose
// kind it knows (virtpod's and Cluster API core's), by server-side dry run.
func TestClusterctlTemplates(t *testing.T) {
	bin, config := clusterctlRepo(t)
	ns := namespace(t)
	vars := []string{"VIRTPOD_KERNEL_IMAGE=registry.example.com/vm/kernel:6.1", "VIRTPOD_ROOT_DISK_IMAGE=registry.example.com/vm/k8s:1.37"}
	// The topology flavor's ClusterClass makes clusterctl look at the management cluster.
	kubeconfig, err := env.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, flavor := range []string{"", "kamaji", "topology"} {
		t.Run("flavor="+flavor, func(t *testing.T) {
			args := []string{"generate", "cluster", "t1", "--kubeconfig", kubeconfig, "--infrastructure", "virtpod:v0.1.0", "--config", config,
				"--target-namespace", ns, "--kubernetes-version", "v1.37.2", "--control-plane-machine-count", "1", "--worker-machine-count", "2"}
			if flavor != "" {
				args = append(args, "--flavor", flavor)
			}
			checked, kamaji := 0, 0
			for _, o := range clusterctlRun(t, bin, vars, args...) {
				if o.GetKind() == "KamajiControlPlane" {
					// Its CRD is not installed here: checked against Kamaji's v1alpha2 fields instead.
					for _, p := range kamajiProblems(o.Object) {
						t.Errorf("KamajiControlPlane %s: %s", o.GetName(), p)
					}
					kamaji++
					continue
				}
				switch o.GroupVersionKind().Group {
				case infrav1.GroupVersion.Group, "cluster.x-k8s.io", "controlplane.cluster.x-k8s.io", "bootstrap.cluster.x-k8s.io":
				default:
					t.Errorf("%s %s: a kind of no provider these templates are for", o.GetKind(), o.GetName())
					continue
				}
				if err := env.Client.Create(context.Background(), o, client.DryRunAll); err != nil {
					t.Errorf("%s %s refused: %v", o.GetKind(), o.GetName(), err)
				}
				checked++
				_, managed := o.GetAnnotations()[infrav1.ManagedByAnnotation]
				if o.GetKind() == "VirtPodCluster" && managed != (flavor == "kamaji") {
					t.Errorf("flavor %q: VirtPodCluster managed-by annotation present=%v", flavor, managed)
				}
			}
			if checked < 4 {
				t.Errorf("only %d objects checked", checked)
			}
			want := 0
			if flavor == "kamaji" {
				want = 1
			}
			if kamaji != want {
				t.Errorf("%d KamajiControlPlanes, want %d", kamaji, want)
			}
		})
	}
}
