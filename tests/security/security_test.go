// Package security checks what virtpod ships against what was reviewed: every RBAC rule of its
// components, and that no container it deploys or renders is privileged or can escalate. A
// change that grows a role or a privilege fails here until docs/security.md and the reviewed
// list are updated with it.
package security

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/golden"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// documents reads every YAML document under config/ with its kind.
func documents(t *testing.T) map[string][][]byte {
	t.Helper()
	byKind := map[string][][]byte{}
	err := filepath.WalkDir(filepath.Join(kubeapi.Root(), "config"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") || strings.Contains(p, "/crd/") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for {
			doc, err := r.Read()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			var meta struct{ Kind string }
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			byKind[meta.Kind] = append(byKind[meta.Kind], doc)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return byKind
}

// TestRBACIsTheReviewedList: one line per (role, group, resource, verb); the file is the review.
func TestRBACIsTheReviewedList(t *testing.T) {
	docs := documents(t)
	var lines []string
	for _, kind := range []string{"ClusterRole", "Role"} {
		for _, doc := range docs[kind] {
			var role rbacv1.ClusterRole // a Role has the same shape
			if err := yaml.Unmarshal(doc, &role); err != nil {
				t.Fatal(err)
			}
			for _, rule := range role.Rules {
				for _, g := range rule.APIGroups {
					for _, r := range rule.Resources {
						for _, v := range rule.Verbs {
							if g == "" {
								g = "core"
							}
							lines = append(lines, fmt.Sprintf("%s %s %s %s %s", kind, role.Name, g, r, v))
						}
					}
				}
				if len(rule.NonResourceURLs) > 0 || len(rule.ResourceNames) > 0 {
					lines = append(lines, fmt.Sprintf("%s %s nonResource=%v names=%v", kind, role.Name, rule.NonResourceURLs, rule.ResourceNames))
				}
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		for _, wild := range []string{" * ", " *\n"} {
			if strings.Contains(l+"\n", wild) {
				t.Errorf("wildcard in a role: %s", l)
			}
		}
	}
	golden.Check(t, "reviewed-rbac.txt", []byte(strings.Join(lines, "\n")+"\n"))
}

// TestNothingPrivileged: no shipped or rendered container is privileged, escalates, or adds a
// capability beyond the reviewed ones; hostPath volumes are only the reviewed ones.
func TestNothingPrivileged(t *testing.T) {
	type pod struct {
		name string
		spec corev1.PodSpec
	}
	var pods []pod
	docs := documents(t)
	for _, kind := range []string{"Deployment", "DaemonSet"} {
		for _, doc := range docs[kind] {
			var d struct {
				Metadata struct{ Name string }
				Spec     struct{ Template corev1.PodTemplateSpec }
			}
			if err := yaml.Unmarshal(doc, &d); err != nil {
				t.Fatal(err)
			}
			pods = append(pods, pod{kind + "/" + d.Metadata.Name, d.Spec.Template.Spec})
		}
	}
	for _, emulated := range []bool{false, true} {
		vm := kubeapi.SampleVM("default", "security")
		vm.Spec.Provider = vmv1.ProviderQEMU
		if !emulated {
			vm.Spec.Acceleration = vmv1.AccelerationKVM
		}
		opts := podspec.DefaultOptions()
		opts.CopyImages = emulated // the copy fallback's init containers too
		pods = append(pods, pod{fmt.Sprintf("runner pod (emulated=%v)", emulated), podspec.Build(vm, opts).Spec})
	}
	// The capabilities each container may add, by pod (docs/security.md's table): the runner
	// none at all (Pod Security restricted); the node agent what building the runners' pod
	// networks takes; the device plugin what making their control directories theirs takes.
	allowedCaps := map[string]map[string]bool{
		"DaemonSet/virtpod-agent":         {"SYS_ADMIN": true, "NET_ADMIN": true, "NET_RAW": true, "MKNOD": true, "DAC_OVERRIDE": true, "CHOWN": true},
		"DaemonSet/virtpod-device-plugin": {"CHOWN": true, "DAC_OVERRIDE": true},
	}
	allowedHostPaths := map[string]bool{"/var/lib/kubelet/device-plugins": true, "/dev": true,
		// The control channel (docs/security.md): the device plugin makes the runners' control
		// directories, the agent reaches their sockets and asks the kubelet whose each is.
		vmv1.HostControlDir: true, "/var/lib/kubelet/pod-resources": true}
	var report bytes.Buffer
	for _, p := range pods {
		if p.spec.HostNetwork || p.spec.HostPID || p.spec.HostIPC {
			t.Errorf("%s shares a host namespace", p.name)
		}
		for _, v := range p.spec.Volumes {
			if v.HostPath != nil {
				if !allowedHostPaths[v.HostPath.Path] {
					t.Errorf("%s mounts hostPath %s, not a reviewed one", p.name, v.HostPath.Path)
				}
				fmt.Fprintf(&report, "%s hostPath %s\n", p.name, v.HostPath.Path)
			}
		}
		for _, c := range append(append([]corev1.Container{}, p.spec.InitContainers...), p.spec.Containers...) {
			sc := c.SecurityContext
			if sc == nil || sc.Privileged == nil && sc.AllowPrivilegeEscalation == nil {
				t.Errorf("%s/%s has no securityContext saying it is unprivileged", p.name, c.Name)
				continue
			}
			if sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s/%s is privileged", p.name, c.Name)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s/%s may escalate privileges", p.name, c.Name)
			}
			if sc.Capabilities == nil || !contains(sc.Capabilities.Drop, "ALL") {
				t.Errorf("%s/%s does not drop all capabilities", p.name, c.Name)
			}
			if sc.Capabilities != nil {
				for _, add := range sc.Capabilities.Add {
					if !allowedCaps[p.name][string(add)] {
						t.Errorf("%s/%s adds capability %s", p.name, c.Name, add)
					}
				}
			}
		}
	}
	if len(pods) < 5 {
		t.Fatalf("found only %d pod specs to check; the manifests moved?", len(pods))
	}
	t.Logf("checked %d pod specs\n%s", len(pods), report.String())
}

// TestControlChannel: the runner pod gets its control directory from the device plugin, never
// from a hostPath, and stays unprivileged; only the DaemonSets mount the node's side, the
// kubelet's pod-resources read-only (the agent makes one kind of file in the control
// directories: a migration source's migrate-out.sock).
func TestControlChannel(t *testing.T) {
	for _, emulated := range []bool{false, true} {
		vm := kubeapi.SampleVM("default", "resizable")
		vm.Spec.Provider = vmv1.ProviderQEMU
		vm.Spec.Guest.MaxCPUs = ptr.To[int32](4)
		vm.Spec.Guest.MaxMemory = ptr.To(resource.MustParse("1Gi"))
		if !emulated {
			vm.Spec.Acceleration = vmv1.AccelerationKVM
		}
		pod := podspec.Build(vm, podspec.DefaultOptions())
		for _, v := range pod.Spec.Volumes {
			if v.HostPath != nil {
				t.Errorf("runner pod (emulated=%v) mounts hostPath %s", emulated, v.HostPath.Path)
			}
		}
		if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
			t.Errorf("runner pod (emulated=%v) gets a service account token", emulated)
		}
		for _, c := range pod.Spec.Containers {
			req, lim := c.Resources.Requests[vmv1.ResourceControl], c.Resources.Limits[vmv1.ResourceControl]
			if req.Value() != 1 || lim.Value() != 1 {
				t.Errorf("runner pod (emulated=%v) container %s requests %s/%s of %s, want 1", emulated, c.Name, req.String(), lim.String(), vmv1.ResourceControl)
			}
			if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("runner pod (emulated=%v) container %s is not unprivileged", emulated, c.Name)
			}
		}
	}
	for _, doc := range documents(t)["DaemonSet"] {
		var d struct {
			Metadata struct{ Name string }
			Spec     struct{ Template corev1.PodTemplateSpec }
		}
		if err := yaml.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		vols := map[string]string{}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.HostPath != nil {
				vols[v.Name] = v.HostPath.Path
			}
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, m := range c.VolumeMounts {
				path := vols[m.Name]
				switch {
				case path == "/var/lib/kubelet/pod-resources" && !m.ReadOnly:
					t.Errorf("%s mounts %s writable", d.Metadata.Name, path)
				case path == "/var/lib/kubelet/pod-resources" && d.Metadata.Name != "virtpod-agent",
					path == vmv1.HostControlDir && d.Metadata.Name != "virtpod-agent" && d.Metadata.Name != "virtpod-device-plugin":
					t.Errorf("%s mounts %s; only the node agent and the device plugin may", d.Metadata.Name, path)
				}
			}
		}
	}
}

func contains(caps []corev1.Capability, want string) bool {
	for _, c := range caps {
		if string(c) == want {
			return true
		}
	}
	return false
}

// TestMigrationPortOnlyFromAgents: the release lets only the agents' own pods reach their
// migration port, anyone their metrics port (read-only counters), and nothing else reach them.
func TestMigrationPortOnlyFromAgents(t *testing.T) {
	var agentLabels map[string]string
	for _, doc := range documents(t)["DaemonSet"] {
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal(doc, &ds); err != nil {
			t.Fatal(err)
		}
		if ds.Name == "virtpod-agent" {
			agentLabels = ds.Spec.Template.Labels
		}
	}
	if len(agentLabels) == 0 {
		t.Fatal("no virtpod-agent DaemonSet under config/")
	}
	var found bool
	for _, doc := range documents(t)["NetworkPolicy"] {
		var np networkingv1.NetworkPolicy
		if err := yaml.Unmarshal(doc, &np); err != nil {
			t.Fatal(err)
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(agentLabels)) || np.Namespace != "virtpod-system" {
			continue
		}
		found = true
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || len(np.Spec.Ingress) != 2 {
			t.Fatalf("NetworkPolicy %s: want two ingress rules (migration, metrics), Ingress enforced: %+v", np.Name, np.Spec)
		}
		if m := np.Spec.Ingress[1]; len(m.From) != 0 || len(m.Ports) != 1 || m.Ports[0].Port == nil || m.Ports[0].Port.IntValue() != 9441 {
			t.Errorf("NetworkPolicy %s: second rule %+v, want port 9441 (metrics) alone", np.Name, m)
		}
		rule := np.Spec.Ingress[0]
		if len(rule.Ports) != 1 || rule.Ports[0].Port == nil || rule.Ports[0].Port.IntValue() != 9440 {
			t.Errorf("NetworkPolicy %s lets in %+v, want port 9440 only", np.Name, rule.Ports)
		}
		if len(rule.From) != 1 || rule.From[0].PodSelector == nil || rule.From[0].NamespaceSelector != nil || rule.From[0].IPBlock != nil {
			t.Fatalf("NetworkPolicy %s lets in %+v, want the agents' pods only", np.Name, rule.From)
		}
		from, err := metav1.LabelSelectorAsSelector(rule.From[0].PodSelector)
		if err != nil || !from.Matches(labels.Set(agentLabels)) || from.Matches(labels.Set{"app": "web"}) {
			t.Errorf("NetworkPolicy %s: from %v is not the agents' pods", np.Name, rule.From[0].PodSelector)
		}
	}
	if !found {
		t.Error("no NetworkPolicy selects the agents' pods in virtpod-system")
	}
}
