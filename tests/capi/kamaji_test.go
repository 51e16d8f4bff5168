package capi

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/virtpod/virtpod/tests/kubeapi"
)

// Kamaji's CRDs are not installed here, so its objects cannot be dry-run; they are checked
// against these facts instead, read from the public source of Kamaji's control-plane provider
// at v0.20.0 (api/v1alpha2, config/crd) and of Kamaji (api/v1alpha1, for the types it embeds).

// kamajiAPIVersion: from v0.20.0, the first release on Cluster API's v1beta2 contract, the
// provider serves KamajiControlPlane in this version only.
const kamajiAPIVersion = "controlplane.cluster.x-k8s.io/v1alpha2"

// kamajiFields are the fields of each object a KamajiControlPlane may hold, by path; a path not
// listed is not looked into.
var kamajiFields = map[string][]string{
	"": {"apiVersion", "kind", "metadata", "spec"},
	"spec": {"controlPlaneEndpoint", "replicas", "version", "dataStoreName", "dataStoreSchema",
		"dataStoreUsername", "dataStoreOverrides", "addons", "admissionControllers", "registry",
		"controllerManager", "apiServer", "scheduler", "kine", "kubelet", "network", "deployment"},
	"spec.addons":           {"coreDNS", "konnectivity", "kubeProxy"},
	"spec.addons.coreDNS":   {"imageRepository", "imageTag", "dnsServiceIPs"},
	"spec.addons.kubeProxy": {"imageRepository", "imageTag"},
	"spec.kubelet":          {"configurationJSONPatches", "preferredAddressTypes", "cgroupfs"},
	"spec.network": {"loadBalancerConfig", "gateway", "ingress", "serviceType", "serviceAddress",
		"advertiseAddress", "serviceLabels", "serviceAnnotations", "additionalServicePorts", "certSANs",
		"dnsServiceIPs"},
}

// kamajiEnums are the values the CRD allows in a field (each item's, for a list).
var kamajiEnums = map[string][]string{
	"spec.network.serviceType":           {"ClusterIP", "NodePort", "LoadBalancer"},
	"spec.kubelet.preferredAddressTypes": {"Hostname", "InternalIP", "ExternalIP", "InternalDNS", "ExternalDNS"},
	"spec.kubelet.cgroupfs":              {"systemd", "cgroupfs"},
}

// kamajiProblems says what in a KamajiControlPlane the provider would refuse or drop. A value
// that is still a clusterctl variable (${...}) is not judged.
func kamajiProblems(obj map[string]any) []string {
	var problems []string
	if v := obj["apiVersion"]; v != kamajiAPIVersion {
		problems = append(problems, "apiVersion "+str(v)+", want "+kamajiAPIVersion)
	}
	if spec, _ := obj["spec"].(map[string]any); spec == nil || spec["version"] == nil {
		problems = append(problems, "spec.version is required")
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		if allowed, ok := kamajiEnums[path]; ok {
			vals, _ := v.([]any)
			if vals == nil {
				vals = []any{v}
			}
			for _, x := range vals {
				if s := str(x); !slices.Contains(allowed, s) && !strings.Contains(s, "${") {
					problems = append(problems, path+": "+s+" is not one of "+strings.Join(allowed, ", "))
				}
			}
		}
		fields, ok := kamajiFields[path]
		m, isMap := v.(map[string]any)
		if !ok || !isMap {
			return
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub := strings.TrimPrefix(path+"."+k, ".")
			if !slices.Contains(fields, k) {
				problems = append(problems, sub+" is not a field of KamajiControlPlane "+kamajiAPIVersion)
				continue
			}
			walk(sub, m[k])
		}
	}
	walk("", obj)
	return problems
}

func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := yaml.Marshal(v)
	return strings.TrimSpace(string(b))
}

// TestKamajiProblems: the check itself finds a wrong version, an unknown field and a value the
// CRD refuses.
func TestKamajiProblems(t *testing.T) {
	obj := map[string]any{
		"apiVersion": "controlplane.cluster.x-k8s.io/v1alpha1", "kind": "KamajiControlPlane",
		"spec": map[string]any{
			"version": "v1.37.2", "dataStoreName": "${KAMAJI_DATASTORE:=default}",
			"kubelet": map[string]any{"cgroupFS": "systemd", "preferredAddressTypes": []any{"InternalIP", "Host"}},
			"network": map[string]any{"serviceType": "${SERVICE_TYPE}"},
		},
	}
	got := kamajiProblems(obj)
	want := []string{
		"apiVersion controlplane.cluster.x-k8s.io/v1alpha1, want " + kamajiAPIVersion,
		"spec.kubelet.cgroupFS is not a field of KamajiControlPlane " + kamajiAPIVersion,
		"spec.kubelet.preferredAddressTypes: Host is not one of Hostname, InternalIP, ExternalIP, InternalDNS, ExternalDNS",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestKamajiExamples: the flavor's template as written and the complete example in
// docs/kamaji.md hold a KamajiControlPlane the provider serves.
func TestKamajiExamples(t *testing.T) {
	template, err := os.ReadFile(filepath.Join(kubeapi.Root(), "config", "clusterctl", "templates", "cluster-template-kamaji.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(kubeapi.Root(), "docs", "kamaji.md"))
	if err != nil {
		t.Fatal(err)
	}
	var docYAML []string
	for _, block := range strings.Split(string(doc), "```yaml\n")[1:] {
		docYAML = append(docYAML, strings.SplitN(block, "```", 2)[0])
	}
	for name, text := range map[string]string{"the template": string(template), "docs/kamaji.md": strings.Join(docYAML, "---\n")} {
		n := 0
		for _, obj := range decodeObjects(t, name, []byte(text)) {
			if obj.GetKind() != "KamajiControlPlane" {
				continue
			}
			n++
			for _, p := range kamajiProblems(obj.Object) {
				t.Errorf("%s: %s", name, p)
			}
		}
		if n != 1 {
			t.Errorf("%s: %d KamajiControlPlanes, want 1", name, n)
		}
	}
}
