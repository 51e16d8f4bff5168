package main

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/virtpod/virtpod/tools/release/pinned"
)

// TestCoreDNSManifest: the DNS the local cluster renders names its image by digest only, sits
// at the kubelet's clusterDNS address, and every kind in it is one startDNS can apply.
func TestCoreDNSManifest(t *testing.T) {
	const image = "10.217.0.1:5000/virtpod/coredns@sha256:0000000000000000000000000000000000000000000000000000000000000000"
	objs, err := renderCoreDNS(image)
	if err != nil {
		t.Fatal(err)
	}
	var stream []string
	kinds := map[string]bool{}
	for _, o := range objs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		stream = append(stream, string(b))
		kinds[o.GetKind()] = true
		if o.GetKind() == "Service" {
			if ip, _, _ := unstructured.NestedString(o.Object, "spec", "clusterIP"); ip != clusterDNSIP {
				t.Errorf("kube-dns at %q, the kubelet's clusterDNS is %s", ip, clusterDNSIP)
			}
		}
	}
	if bad := pinned.Unpinned([]byte(strings.Join(stream, "\n---\n"))); len(bad) > 0 {
		t.Errorf("CoreDNS names images without a digest: %q", bad)
	}
	if !strings.Contains(strings.Join(stream, ""), image) {
		t.Error("the image given is not in the manifest")
	}
	for _, k := range []string{"Deployment", "Service", "ConfigMap", "ClusterRole", "ClusterRoleBinding", "ServiceAccount"} {
		if !kinds[k] {
			t.Errorf("no %s", k)
		}
	}
}
