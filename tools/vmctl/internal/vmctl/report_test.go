package vmctl

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

var clockNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func class(name string, handler vmv1.Provider, def bool, avail metav1.ConditionStatus, msg string, ready, total int32, versions ...string) vmv1.ProviderClass {
	pc := vmv1.ProviderClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       vmv1.ProviderClassSpec{Handler: handler, Enabled: ptr.To(true)},
		Status: vmv1.ProviderClassStatus{ReadyNodes: ready, TotalNodes: total, Versions: versions,
			Conditions: []metav1.Condition{{Type: vmv1.ConditionAvailable, Status: avail, Reason: "R", Message: msg}}},
	}
	if def {
		pc.Annotations = map[string]string{vmv1.AnnotationDefaultClass: "true"}
	}
	return pc
}

func hvnode(name string, age time.Duration, kvm vmv1.KVMStatus, provs ...vmv1.ProviderStatus) vmv1.HypervisorNode {
	return vmv1.HypervisorNode{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: vmv1.HypervisorNodeStatus{
			HeartbeatTime: metav1.NewTime(clockNow.Add(-age)),
			Arch:          "amd64",
			KVM:           kvm,
			Emulation:     vmv1.EmulationStatus{Available: true},
			Providers:     provs,
		},
	}
}

// fixture is a three-node cluster: qemu everywhere, cloud-hypervisor nowhere and disabled,
// one node with paravirtual KVM, one whose agent stopped reporting.
func fixture() ([]vmv1.ProviderClass, []vmv1.HypervisorNode) {
	qemu := class("qemu", vmv1.ProviderQEMU, true, metav1.ConditionTrue, "1/3 nodes fit: 1 with a stale report (is the node agent running?), 1 without usable KVM", 1, 3, "8.2.2")
	qemu.Spec.AllowEmulation = true
	ch := class("cloud-hypervisor", vmv1.ProviderCloudHypervisor, false, metav1.ConditionFalse,
		"disabled by an admin: no binary yet; 0/3 nodes fit: 3 without cloud-hypervisor", 0, 3)
	ch.Spec.Enabled, ch.Spec.DisabledReason = ptr.To(false), "no binary yet"
	q := vmv1.ProviderStatus{Name: vmv1.ProviderQEMU, Available: true, Version: "8.2.2"}
	chMissing := vmv1.ProviderStatus{Name: vmv1.ProviderCloudHypervisor, Reason: "cloud-hypervisor not found"}
	nodes := []vmv1.HypervisorNode{
		hvnode("node-c", 10*time.Minute, vmv1.KVMStatus{State: vmv1.KVMUsable}, q, chMissing),
		hvnode("node-a", 12*time.Second, vmv1.KVMStatus{State: vmv1.KVMUsable}, q, chMissing),
		hvnode("node-b", 40*time.Second, vmv1.KVMStatus{State: vmv1.KVMUnusable, Reason: "guest code did not run\twithin 2s"}, q),
	}
	return []vmv1.ProviderClass{qemu, ch}, nodes
}

func TestReportProblems(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func([]vmv1.ProviderClass) []vmv1.ProviderClass
		problem string // substring; empty means none
	}{
		{"default available", func(c []vmv1.ProviderClass) []vmv1.ProviderClass { return c }, ""},
		{"no classes", func([]vmv1.ProviderClass) []vmv1.ProviderClass { return nil }, "no ProviderClass exists"},
		{"no default", func(c []vmv1.ProviderClass) []vmv1.ProviderClass { c[0].Annotations = nil; return c }, "no ProviderClass is marked default"},
		{"default unavailable", func(c []vmv1.ProviderClass) []vmv1.ProviderClass {
			c[0].Status.Conditions[0].Status, c[0].Status.Conditions[0].Message = metav1.ConditionFalse, "0/3 nodes fit: 3 without usable KVM"
			return c
		}, "default provider qemu is not available: 0/3 nodes fit: 3 without usable KVM"},
		{"default without status", func(c []vmv1.ProviderClass) []vmv1.ProviderClass { c[0].Status = vmv1.ProviderClassStatus{}; return c }, noStatus},
		{"two defaults", func(c []vmv1.ProviderClass) []vmv1.ProviderClass {
			c[1].Annotations = map[string]string{vmv1.AnnotationDefaultClass: "true"}
			return c
		}, "2 ProviderClasses are marked default (cloud-hypervisor, qemu)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			classes, nodes := fixture()
			r := buildReport(tc.edit(classes), nodes, clockNow)
			if tc.problem == "" && r.Problem != "" || !strings.Contains(r.Problem, tc.problem) {
				t.Errorf("problem %q, want %q", r.Problem, tc.problem)
			}
			if tc.problem != "" && r.DefaultAvailable {
				t.Errorf("defaultAvailable true with problem %q", r.Problem)
			}
		})
	}
}

// TestReportJSON pins the field names scripts rely on.
func TestReportJSON(t *testing.T) {
	classes, nodes := fixture()
	b, err := json.Marshal(buildReport(classes, nodes, clockNow))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		DefaultProvider  string `json:"defaultProvider"`
		DefaultAvailable bool   `json:"defaultAvailable"`
		Providers        []map[string]any
		Nodes            []map[string]any
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.DefaultProvider != "qemu" || !got.DefaultAvailable || len(got.Providers) != 2 || len(got.Nodes) != 3 {
		t.Fatalf("json: %s", b)
	}
	ch := got.Providers[0]
	if ch["name"] != "cloud-hypervisor" || ch["enabled"] != false || ch["disabledReason"] != "no binary yet" || ch["available"] != "False" {
		t.Errorf("provider: %v", ch)
	}
	c := got.Nodes[2]
	if c["name"] != "node-c" || c["stale"] != true || c["heartbeatAge"] != "10m" || c["kvm"] != "Usable" {
		t.Errorf("node: %v", c)
	}
}

func TestNodeNeverReported(t *testing.T) {
	hv := vmv1.HypervisorNode{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}
	r := buildReport(nil, []vmv1.HypervisorNode{hv}, clockNow)
	if n := r.Nodes[0]; n.KVM != "Unknown" || n.HeartbeatAge != "never" || !n.Stale || n.Heartbeat != nil {
		t.Errorf("node: %+v", n)
	}
}
