package v1alpha1_test

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

func vmMigration(name string) *vmv1.VirtualMachineMigration {
	return &vmv1.VirtualMachineMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: vmv1.VirtualMachineMigrationSpec{VMName: "web", TargetNode: "node-2"}}
}

// TestMigrationValidation: a VirtualMachineMigration names its VM, keeps its VM and node, and
// has a sane timeout; each refusal names the field and the fix.
func TestMigrationValidation(t *testing.T) {
	ctx := context.Background()
	bad := []struct {
		name   string
		mutate func(*vmv1.VirtualMachineMigration)
		field  string
		hint   string
	}{
		{"no VM", func(m *vmv1.VirtualMachineMigration) { m.Spec.VMName = "" }, "spec.vmName", "at least 1 chars long"},
		{"not a VM's name", func(m *vmv1.VirtualMachineMigration) { m.Spec.VMName = "Bad_Name" }, "spec.vmName", "must be a VirtualMachine's name: a DNS label"},
		{"timeout too short", func(m *vmv1.VirtualMachineMigration) { m.Spec.CompletionTimeoutSeconds = 5 }, "spec.completionTimeoutSeconds", "greater than or equal to 10"},
		{"negative bandwidth", func(m *vmv1.VirtualMachineMigration) { m.Spec.BandwidthMiBps = -1 }, "spec.bandwidthMiBps", "greater than or equal to 0"},
		{"claim name", func(m *vmv1.VirtualMachineMigration) {
			m.Spec.Claims = []vmv1.ClaimTarget{{Disk: "data", ClaimName: "Data_2"}}
		}, "spec.claims[0].claimName", "a DNS subdomain"},
		{"a disk twice", func(m *vmv1.VirtualMachineMigration) {
			m.Spec.Claims = []vmv1.ClaimTarget{{Disk: "data", ClaimName: "a"}, {Disk: "data", ClaimName: "b"}}
		}, "spec.claims[1]", "Duplicate value"},
	}
	for i, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			m := vmMigration(fmt.Sprintf("mig-bad-%d", i))
			tc.mutate(m)
			refused(t, env.Client.Create(ctx, m), true, tc.field, tc.hint)
		})
	}

	m := vmMigration("mig-immutable")
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	if m.Spec.CompletionTimeoutSeconds != 300 {
		t.Errorf("completionTimeoutSeconds defaulted to %d, want 300", m.Spec.CompletionTimeoutSeconds)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*vmv1.VirtualMachineMigration)
		field  string
	}{
		{"vmName", func(m *vmv1.VirtualMachineMigration) { m.Spec.VMName = "other" }, "spec.vmName is immutable; create a new VirtualMachineMigration"},
		{"targetNode", func(m *vmv1.VirtualMachineMigration) { m.Spec.TargetNode = "node-3" }, "spec.targetNode is immutable; create a new VirtualMachineMigration"},
		{"claims", func(m *vmv1.VirtualMachineMigration) {
			m.Spec.Claims = []vmv1.ClaimTarget{{Disk: "root", ClaimName: "r"}}
		}, "spec.claims is immutable"},
	} {
		t.Run("immutable "+tc.name, func(t *testing.T) {
			changed := m.DeepCopy()
			tc.mutate(changed)
			refused(t, env.Client.Update(ctx, changed), true, tc.field)
		})
	}
}

// TestMigrationFieldsOfVM: networkMode and evictionStrategy take only their values.
func TestMigrationFieldsOfVM(t *testing.T) {
	ctx := context.Background()
	vm := kubeapi.SampleVM("default", "netmode-bad")
	vm.Spec.Guest.NetworkMode = "Bridge"
	refused(t, env.Client.Create(ctx, vm), true, "spec.guest.networkMode", `"Pod", "Masquerade"`)
	// None is the runner's alone (--network=none), not the API's.
	vm = kubeapi.SampleVM("default", "netmode-none")
	vm.Spec.Guest.NetworkMode = vmv1.NetworkNone
	refused(t, env.Client.Create(ctx, vm), true, "spec.guest.networkMode", `"Pod", "Masquerade"`)
	vm = kubeapi.SampleVM("default", "eviction-bad")
	vm.Spec.EvictionStrategy = "Evict"
	refused(t, env.Client.Create(ctx, vm), true, "spec.evictionStrategy", `"None", "LiveMigrate"`)
	vm = kubeapi.SampleVM("default", "migratable-spec")
	vm.Spec.Guest.NetworkMode, vm.Spec.EvictionStrategy = vmv1.NetworkMasquerade, vmv1.EvictionLiveMigrate
	if err := env.Client.Create(ctx, vm); err != nil {
		t.Fatalf("a Masquerade LiveMigrate VM was refused: %v", err)
	}
}
