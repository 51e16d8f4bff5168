package vmctl

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

func render(t *testing.T, r report) string {
	t.Helper()
	var b bytes.Buffer
	if err := renderTable(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestRenderTable(t *testing.T) {
	classes, nodes := fixture()
	r := buildReport(classes, nodes, clockNow)
	want := `PROVIDERS
NAME              HANDLER           DEFAULT  ENABLED  AVAILABLE  READY  VERSIONS  EMULATION
cloud-hypervisor  cloud-hypervisor  -        no [1]   False [2]  0/3    -         no
qemu              qemu              yes      yes      True [3]   1/3    8.2.2     allowed
[1] cloud-hypervisor: disabled: no binary yet
[2] cloud-hypervisor: disabled by an admin: no binary yet; 0/3 nodes fit: 3 without cloud-hypervisor
[3] qemu: 1/3 nodes fit: 1 with a stale report (is the node agent running?), 1 without usable KVM

NODES
NAME    KVM           EMULATION  CLOUD-HYPERVISOR  QEMU   HEARTBEAT
node-a  Usable        yes        missing [4]       8.2.2  12s
node-b  Unusable [5]  yes        not reported      8.2.2  40s
node-c  Usable        yes        missing [4]       8.2.2  10m (stale)
[4] node-a, node-c: cloud-hypervisor: cloud-hypervisor not found
[5] node-b: kvm: guest code did not run within 2s

default provider: qemu (available)
`
	if got := render(t, r); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	if r.Problem != "" || !r.DefaultAvailable || r.DefaultProvider != "qemu" {
		t.Errorf("default: %+v", r)
	}
}

// TestRowsStayShort: a node agent's KVM reason runs to hundreds of characters (the probe's
// output); rows keep to a terminal's width and the reason is printed whole under the table.
func TestRowsStayShort(t *testing.T) {
	classes, nodes := fixture()
	long := "KVM_RUN of a probe guest did not return within 2s: paravirtual KVM (kvm_pvm) is loaded " +
		"but hangs guests on this kernel (6.1.0-28-cloud-amd64); load kvm_intel or kvm_amd, or let VMs " +
		"ask for acceleration: Emulated; details in the agent's log on this node"
	nodes[2].Status.KVM = vmv1.KVMStatus{State: vmv1.KVMUnusable, Reason: long}
	nodes[1].Status.Emulation = vmv1.EmulationStatus{Reason: "qemu-system-x86_64: " + strings.Repeat("x", 150)}
	classes[0].Status.Conditions[0].Message = strings.Repeat("a long class message ", 12)
	out := render(t, buildReport(classes, nodes, clockNow))
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "[") {
			continue // a note: as long as its reason
		}
		if len(line) > 100 {
			t.Errorf("row of %d columns:\n%s", len(line), line)
		}
	}
	for _, want := range []string{
		"node-b  Unusable [6]",
		"[6] node-b: kvm: " + long + "\n",
		"[4] node-a: emulation: qemu-system-x86_64: xxx",
		"[3] qemu: a long class message",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestNotesShareAndCount: rows with the same reason share one note, which names a few of them
// and counts the rest.
func TestNotesShareAndCount(t *testing.T) {
	var nodes []vmv1.HypervisorNode
	for i := range 5 {
		nodes = append(nodes, hvnode(fmt.Sprintf("node-%d", i), time.Second,
			vmv1.KVMStatus{State: vmv1.KVMUnusable, Reason: "no /dev/kvm"}))
	}
	nodes = append(nodes, hvnode("node-x", time.Second, vmv1.KVMStatus{State: vmv1.KVMUnusable, Reason: "kvm_pvm hangs"}))
	out := render(t, buildReport(nil, nodes, clockNow))
	if strings.Count(out, "Unusable [1]") != 5 || strings.Count(out, "Unusable [2]") != 1 {
		t.Errorf("references:\n%s", out)
	}
	for _, want := range []string{
		"[1] node-0, node-1, node-2 and 2 more: kvm: no /dev/kvm\n",
		"[2] node-x: kvm: kvm_pvm hangs\n",
		"PROVIDERS\n  (no ProviderClass; is virtpod installed?)\n\nNODES\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "[3]") {
		t.Errorf("a note per distinct reason only:\n%s", out)
	}
}
