package providerclass_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/manager"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var (
	env   *kubeapi.Env
	clock = kubeapi.NewClock()
)

type withManager struct{ m interface{ Run() int } }

func (w withManager) Run() int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mgr, err := manager.New(env.Config, manager.Options{Pod: podspec.DefaultOptions(), MetricsAddr: "0", Now: clock.Now})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() { _ = mgr.Start(ctx) }()
	return w.m.Run()
}

func TestMain(m *testing.M) { kubeapi.Main(withManager{m}, &env) }

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	kubeapi.Eventually(t, what, 20*time.Second, check)
}

// report creates a Node and the node agent's report for it.
func report(t *testing.T, name string, labels map[string]string, st vmv1.HypervisorNodeStatus) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	hv := &vmv1.HypervisorNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(ctx, hv); err != nil {
		t.Fatal(err)
	}
	hv.Status = st
	if err := env.Client.Status().Update(ctx, hv); err != nil {
		t.Fatal(err)
	}
}

func qemu(version string) []vmv1.ProviderStatus {
	return []vmv1.ProviderStatus{{Name: vmv1.ProviderQEMU, Available: true, Version: version, Binary: "/usr/bin/qemu-system-x86_64"},
		{Name: vmv1.ProviderCloudHypervisor, Reason: "provider binary not found: cloud-hypervisor (/usr/bin/cloud-hypervisor)"}}
}

func classStatus(t *testing.T, name string, want func(*vmv1.ProviderClass) error) *vmv1.ProviderClass {
	t.Helper()
	pc := &vmv1.ProviderClass{}
	eventually(t, "status of class "+name, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, pc); err != nil {
			return err
		}
		if err := want(pc); err != nil {
			return fmt.Errorf("%w; status %+v", err, pc.Status)
		}
		return nil
	})
	return pc
}

func cond(pc *vmv1.ProviderClass, typ string, status metav1.ConditionStatus, reason, msg string) error {
	c := meta.FindStatusCondition(pc.Status.Conditions, typ)
	if c == nil || c.Status != status || c.Reason != reason || !strings.Contains(c.Message, msg) {
		return fmt.Errorf("%s condition %+v, want %s/%s containing %q", typ, c, status, reason, msg)
	}
	return nil
}

// TestClassStatusFromNodeReports aggregates fresh and stale reports, selectors, KVM and
// emulation, and an admin's disabling, into each class's counts, versions and conditions.
func TestClassStatusFromNodeReports(t *testing.T) {
	ctx := context.Background()
	strict := &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: "qemu"}, Spec: vmv1.ProviderClassSpec{Handler: vmv1.ProviderQEMU}}
	if err := env.Client.Create(ctx, strict); err != nil {
		t.Fatal(err)
	}
	classStatus(t, "qemu", func(pc *vmv1.ProviderClass) error {
		return cond(pc, vmv1.ConditionAvailable, metav1.ConditionFalse, "NoNodes", "is the virtpod-agent DaemonSet running?")
	})

	now := metav1.NewTime(clock.Now())
	old := metav1.NewTime(clock.Now().Add(-10 * time.Minute))
	report(t, "kvm-node", map[string]string{"pool": "vms"}, vmv1.HypervisorNodeStatus{HeartbeatTime: now,
		KVM: vmv1.KVMStatus{State: vmv1.KVMUsable}, Emulation: vmv1.EmulationStatus{Available: true}, Providers: qemu("7.2.22")})
	report(t, "pvm-node", map[string]string{"pool": "vms"}, vmv1.HypervisorNodeStatus{HeartbeatTime: now,
		KVM: vmv1.KVMStatus{State: vmv1.KVMUnusable, Reason: "kvm_pvm cannot run stock kernels"}, Emulation: vmv1.EmulationStatus{Available: true}, Providers: qemu("8.2.0")})
	report(t, "bare-node", map[string]string{"pool": "vms"}, vmv1.HypervisorNodeStatus{HeartbeatTime: now,
		KVM: vmv1.KVMStatus{State: vmv1.KVMUsable}, Providers: []vmv1.ProviderStatus{{Name: vmv1.ProviderQEMU, Reason: "provider binary not found"}}})
	report(t, "gone-node", map[string]string{"pool": "vms"}, vmv1.HypervisorNodeStatus{HeartbeatTime: old,
		KVM: vmv1.KVMStatus{State: vmv1.KVMUsable}, Providers: qemu("7.2.22")})
	report(t, "web-node", map[string]string{"pool": "web"}, vmv1.HypervisorNodeStatus{HeartbeatTime: now,
		KVM: vmv1.KVMStatus{State: vmv1.KVMUsable}, Providers: qemu("7.2.22")})

	classStatus(t, "qemu", func(pc *vmv1.ProviderClass) error {
		if pc.Status.ReadyNodes != 2 || pc.Status.TotalNodes != 5 || strings.Join(pc.Status.Versions, ",") != "7.2.22" {
			return fmt.Errorf("counts")
		}
		return cond(pc, vmv1.ConditionAvailable, metav1.ConditionTrue, "NodesReady",
			"2/5 nodes fit: 1 with a stale report (is the node agent running?), 1 without qemu, 1 without usable KVM")
	})

	// Emulation allowed: the node without usable KVM counts; a selector leaves out web-node.
	editSpec(t, "qemu", func(s *vmv1.ProviderClassSpec) {
		s.AllowEmulation = true
		s.Scheduling = &vmv1.ProviderScheduling{NodeSelector: map[string]string{"pool": "vms"}}
	})
	classStatus(t, "qemu", func(pc *vmv1.ProviderClass) error {
		if pc.Status.ReadyNodes != 2 || strings.Join(pc.Status.Versions, ",") != "7.2.22,8.2.0" {
			return fmt.Errorf("counts")
		}
		return cond(pc, vmv1.ConditionAvailable, metav1.ConditionTrue, "NodesReady", "1 excluded by the class's nodeSelector")
	})

	// cloud-hypervisor is nowhere: not available, and the message says where it is missing.
	ch := &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: "cloud-hypervisor"}, Spec: vmv1.ProviderClassSpec{Handler: vmv1.ProviderCloudHypervisor}}
	if err := env.Client.Create(ctx, ch); err != nil {
		t.Fatal(err)
	}
	classStatus(t, "cloud-hypervisor", func(pc *vmv1.ProviderClass) error {
		return cond(pc, vmv1.ConditionAvailable, metav1.ConditionFalse, "NoReadyNodes", "0/5 nodes fit: 4 without cloud-hypervisor, 1 with a stale report")
	})

	// An admin disables qemu; then the kvm node's report ages past the limit with no event.
	setEnabled(t, "qemu", false, "host upgrade in progress")
	classStatus(t, "qemu", func(pc *vmv1.ProviderClass) error {
		if err := cond(pc, vmv1.ConditionEnabled, metav1.ConditionFalse, "DisabledByAdmin", "host upgrade in progress"); err != nil {
			return err
		}
		return cond(pc, vmv1.ConditionAvailable, metav1.ConditionFalse, "DisabledByAdmin", "host upgrade in progress")
	})
	setEnabled(t, "qemu", true, "")
	classStatus(t, "qemu", func(pc *vmv1.ProviderClass) error {
		return cond(pc, vmv1.ConditionEnabled, metav1.ConditionTrue, "Enabled", "")
	})

	// Every agent goes quiet: four minutes later no report is fresh. (The controller's own timer
	// fires at the staleness deadline; here the clock jumps and the next event reconciles.)
	clock.Advance(4 * time.Minute)
	setEnabled(t, "qemu", true, "poke")
	classStatus(t, "qemu", func(pc *vmv1.ProviderClass) error {
		return cond(pc, vmv1.ConditionAvailable, metav1.ConditionFalse, "NoReadyNodes", "0/5 nodes fit: 5 with a stale report")
	})
}

// editSpec changes a class as an admin does, retrying on a conflict with the status writer.
func editSpec(t *testing.T, name string, edit func(*vmv1.ProviderClassSpec)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pc := &vmv1.ProviderClass{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, pc); err != nil {
			return err
		}
		edit(&pc.Spec)
		return env.Client.Update(context.Background(), pc)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func setEnabled(t *testing.T, name string, enabled bool, reason string) {
	t.Helper()
	editSpec(t, name, func(s *vmv1.ProviderClassSpec) { s.Enabled, s.DisabledReason = ptr.To(enabled), reason })
}

// TestStatusDefault: status.default marks the one class annotated as the default, and no class
// while two claim it (admission then sets no provider rather than pick one of the rivals).
func TestStatusDefault(t *testing.T) {
	ctx := context.Background()
	for _, h := range []vmv1.Provider{vmv1.ProviderQEMU, vmv1.ProviderCloudHypervisor} {
		pc := &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: string(h)}, Spec: vmv1.ProviderClassSpec{Handler: h}}
		if err := env.Client.Create(ctx, pc); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	markDefault := func(name string, on bool) {
		t.Helper()
		value := `"true"`
		if !on {
			value = "null"
		}
		pc := &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+vmv1.AnnotationDefaultClass+`":`+value+`}}}`))
		if err := env.Client.Patch(ctx, pc, patch); err != nil {
			t.Fatal(err)
		}
	}
	defaults := func(qemu, ch bool) {
		t.Helper()
		for name, want := range map[string]bool{"qemu": qemu, "cloud-hypervisor": ch} {
			classStatus(t, name, func(pc *vmv1.ProviderClass) error {
				if pc.Status.Default != want {
					return fmt.Errorf("status.default %v, want %v", pc.Status.Default, want)
				}
				return nil
			})
		}
	}
	markDefault("qemu", true)
	defaults(true, false)
	markDefault("cloud-hypervisor", true) // two claim it: neither is the default
	defaults(false, false)
	markDefault("qemu", false)
	defaults(false, true)
	markDefault("cloud-hypervisor", false)
	defaults(false, false)
}
