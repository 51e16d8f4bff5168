package vmctl

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

// TestMain starts a real API server when `make test` provides one. Without it (and not under
// CI) only the API tests skip, so the pure tests still run in a bare `go test`.
func TestMain(m *testing.M) {
	if os.Getenv("CI") != "true" && (os.Getenv("TEST_ASSET_KUBE_APISERVER") == "" || os.Getenv("TEST_ASSET_ETCD") == "") {
		os.Exit(m.Run())
	}
	kubeapi.Main(m, &env)
}

func needAPI(t *testing.T) string {
	t.Helper()
	if env == nil {
		t.Skip("no kube-apiserver: set TEST_ASSET_KUBE_APISERVER and TEST_ASSET_ETCD (make test does)")
	}
	kc, err := env.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// vmctl runs the command in-process, as a user would from a shell.
func vmctl(args ...string) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	code = Run(append([]string{"vmctl"}, args...), &o, &e)
	return o.String(), e.String(), code
}

func createClass(t *testing.T, pc *vmv1.ProviderClass) {
	t.Helper()
	ctx := context.Background()
	st := pc.Status
	if err := env.Client.Create(ctx, pc); err != nil {
		t.Fatal(err)
	}
	// No controller runs here: write the status it would have written.
	pc.Status = st
	if err := env.Client.Status().Update(ctx, pc); err != nil {
		t.Fatal(err)
	}
}

func createNode(t *testing.T, hv *vmv1.HypervisorNode) {
	t.Helper()
	ctx := context.Background()
	st := hv.Status
	if err := env.Client.Create(ctx, hv); err != nil {
		t.Fatal(err)
	}
	hv.Status = st // the agent writes its report through the status subresource
	if err := env.Client.Status().Update(ctx, hv); err != nil {
		t.Fatal(err)
	}
}

func TestStatusAndProviderAgainstAPIServer(t *testing.T) {
	kc := needAPI(t)
	ctx := context.Background()
	now := time.Now()
	cond := func(s metav1.ConditionStatus, reason, msg string) []metav1.Condition {
		return []metav1.Condition{{Type: vmv1.ConditionAvailable, Status: s, Reason: reason, Message: msg, LastTransitionTime: metav1.Now()}}
	}
	qemu := &vmv1.ProviderClass{
		ObjectMeta: metav1.ObjectMeta{Name: "qemu", Annotations: map[string]string{vmv1.AnnotationDefaultClass: "true"}},
		Spec:       vmv1.ProviderClassSpec{Handler: vmv1.ProviderQEMU, AllowEmulation: true},
		Status: vmv1.ProviderClassStatus{ReadyNodes: 1, TotalNodes: 2, Versions: []string{"8.2.2"},
			Conditions: cond(metav1.ConditionTrue, "NodesReady", "1/2 nodes fit: 1 with a stale report (is the node agent running?)")},
	}
	ch := &vmv1.ProviderClass{
		ObjectMeta: metav1.ObjectMeta{Name: "cloud-hypervisor"},
		Spec:       vmv1.ProviderClassSpec{Handler: vmv1.ProviderCloudHypervisor},
		Status: vmv1.ProviderClassStatus{ReadyNodes: 0, TotalNodes: 2,
			Conditions: cond(metav1.ConditionFalse, "NoReadyNodes", "0/2 nodes fit: 1 with a stale report (is the node agent running?), 1 without cloud-hypervisor")},
	}
	createClass(t, qemu)
	createClass(t, ch)
	createNode(t, &vmv1.HypervisorNode{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status: vmv1.HypervisorNodeStatus{
			HeartbeatTime: metav1.NewTime(now.Add(-5 * time.Second)), Arch: "amd64",
			KVM:       vmv1.KVMStatus{State: vmv1.KVMUnusable, Reason: "paravirtual KVM hangs guests"},
			Emulation: vmv1.EmulationStatus{Available: true},
			Providers: []vmv1.ProviderStatus{
				{Name: vmv1.ProviderQEMU, Available: true, Version: "8.2.2"},
				{Name: vmv1.ProviderCloudHypervisor, Reason: "cloud-hypervisor: not found in PATH"},
			},
		},
	})
	createNode(t, &vmv1.HypervisorNode{
		ObjectMeta: metav1.ObjectMeta{Name: "node-b"},
		Status: vmv1.HypervisorNodeStatus{
			HeartbeatTime: metav1.NewTime(now.Add(-10 * time.Minute)),
			KVM:           vmv1.KVMStatus{State: vmv1.KVMUsable},
			Providers:     []vmv1.ProviderStatus{{Name: vmv1.ProviderQEMU, Available: true, Version: "8.2.2"}},
		},
	})

	t.Run("status table", func(t *testing.T) {
		// KUBECONFIG, not the flag: the standard loading rules are what users rely on.
		t.Setenv("KUBECONFIG", kc)
		out, errOut, code := vmctl("status")
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
		}
		for _, want := range []string{
			"1/2 nodes fit: 1 with a stale report",
			"cloud-hypervisor  cloud-hypervisor  -        yes",
			"missing [", // the reasons are notes under the table
			"node-a: cloud-hypervisor: cloud-hypervisor: not found in PATH",
			"Unusable [",
			"node-a: kvm: paravirtual KVM hangs guests",
			"10m (stale)",
			"not reported", // node-b says nothing of cloud-hypervisor
			"default provider: qemu (available)",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout lacks %q:\n%s", want, out)
			}
		}
		t.Logf("vmctl status:\n%s", out)
	})

	t.Run("status json", func(t *testing.T) {
		out, _, code := vmctl("--kubeconfig", kc, "status", "-o", "json")
		var r report
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
			t.Fatalf("exit %d, %v:\n%s", code, err, out)
		}
		if r.DefaultProvider != "qemu" || !r.DefaultAvailable || len(r.Providers) != 2 || len(r.Nodes) != 2 ||
			!r.Nodes[1].Stale || r.Nodes[0].Stale || r.Providers[1].ReadyNodes != 1 {
			t.Errorf("report: %+v", r)
		}
	})

	t.Run("status yaml", func(t *testing.T) {
		out, _, code := vmctl("--kubeconfig", kc, "status", "-o", "yaml")
		if code != 0 || !strings.Contains(out, "defaultProvider: qemu") || !strings.Contains(out, "defaultAvailable: true") {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})

	t.Run("unknown context", func(t *testing.T) {
		_, errOut, code := vmctl("--kubeconfig", kc, "--context", "nope", "status")
		if code != 1 || !strings.Contains(errOut, "nope") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})

	t.Run("disable needs a reason", func(t *testing.T) {
		_, errOut, code := vmctl("--kubeconfig", kc, "provider", "disable", "cloud-hypervisor")
		if code == 0 || !strings.Contains(errOut, "--reason") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})

	t.Run("unknown class", func(t *testing.T) {
		_, errOut, code := vmctl("--kubeconfig", kc, "provider", "disable", "firecracker", "--reason", "x")
		if code == 0 || !strings.Contains(errOut, `ProviderClass "firecracker" not found`) || !strings.Contains(errOut, "vmctl status") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})

	t.Run("disable then enable", func(t *testing.T) {
		out, errOut, code := vmctl("--kubeconfig", kc, "provider", "disable", "cloud-hypervisor", "--reason", "no binary on these hosts yet")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		if !strings.Contains(out, "cloud-hypervisor disabled") {
			t.Errorf("stdout %q", out)
		}
		got := &vmv1.ProviderClass{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "cloud-hypervisor"}, got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.Enabled == nil || *got.Spec.Enabled || got.Spec.DisabledReason != "no binary on these hosts yet" {
			t.Errorf("after disable: %+v", got.Spec)
		}
		// The merge patch changed only spec.enabled and spec.disabledReason.
		if got.Spec.Handler != vmv1.ProviderCloudHypervisor || len(got.Status.Conditions) != 1 || got.Status.TotalNodes != 2 {
			t.Errorf("patch touched more than spec.enabled: %+v", got)
		}
		// The table shows the spec's reason even before a controller updates the condition.
		out, _, _ = vmctl("--kubeconfig", kc, "status")
		if !strings.Contains(out, "no [") || !strings.Contains(out, "cloud-hypervisor: disabled: no binary on these hosts yet") {
			t.Errorf("status after disable:\n%s", out)
		}

		if _, errOut, code := vmctl("--kubeconfig", kc, "provider", "enable", "cloud-hypervisor"); code != 0 {
			t.Fatalf("enable: exit %d, stderr %q", code, errOut)
		}
		got = &vmv1.ProviderClass{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "cloud-hypervisor"}, got); err != nil {
			t.Fatal(err)
		}
		if !ptr.Deref(got.Spec.Enabled, false) || got.Spec.DisabledReason != "" {
			t.Errorf("after enable: %+v", got.Spec)
		}
	})

	// Last: it changes the default class's status.
	t.Run("default unavailable exits 1", func(t *testing.T) {
		cur := &vmv1.ProviderClass{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "qemu"}, cur); err != nil {
			t.Fatal(err)
		}
		cur.Status.ReadyNodes = 0
		cur.Status.Conditions = cond(metav1.ConditionFalse, "NoReadyNodes", "0/2 nodes fit: 1 with a stale report (is the node agent running?), 1 without usable KVM")
		if err := env.Client.Status().Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := vmctl("--kubeconfig", kc, "status")
		if code != 1 || !strings.Contains(errOut, "default provider qemu is not available: 0/2 nodes fit") ||
			!strings.Contains(out, "default provider: qemu (NOT available)") {
			t.Errorf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
		}
		out, _, code = vmctl("--kubeconfig", kc, "status", "-o", "json")
		var r report
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != 1 || r.DefaultAvailable {
			t.Errorf("json: exit %d, %v, %+v", code, err, r)
		}

		// No default at all is also a failure a newcomer must see.
		if err := env.Client.Patch(ctx, cur, client.RawPatch("application/merge-patch+json",
			[]byte(`{"metadata":{"annotations":{"`+vmv1.AnnotationDefaultClass+`":null}}}`))); err != nil {
			t.Fatal(err)
		}
		_, errOut, code = vmctl("--kubeconfig", kc, "status")
		if code != 1 || !strings.Contains(errOut, "no ProviderClass is marked default") {
			t.Errorf("no default: exit %d, stderr %q", code, errOut)
		}
	})
}
