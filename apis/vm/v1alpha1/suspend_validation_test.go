package v1alpha1_test

import (
	"context"
	"fmt"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// suspendable is a VM whose every writable disk is a claim, with a state claim of its own.
func suspendable(name string) *vmv1.VirtualMachine {
	vm := kubeapi.SampleVM("default", name)
	vm.Spec.Provider = vmv1.ProviderQEMU
	vm.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: name + "-root"}
	vm.Spec.Guest.Disks = []vmv1.Disk{{Name: "data", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: name + "-data"}}}
	vm.Spec.Guest.StateClaim = &vmv1.StateClaim{ClaimName: name + "-state"}
	vm.Spec.Guest.NetworkMode = vmv1.NetworkMasquerade
	return vm
}

// TestSuspendFields: what spec.suspend and spec.guest.stateClaim need, each refusal naming the
// field and the fix.
func TestSuspendFields(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name   string
		mutate func(*vmv1.VirtualMachine)
		field  string // "" when accepted
		hint   string
	}{
		{"suspend with a state claim", func(v *vmv1.VirtualMachine) { v.Spec.Suspend = true }, "", ""},
		{"suspend without a state claim", func(v *vmv1.VirtualMachine) { v.Spec.Suspend, v.Spec.Guest.StateClaim = true, nil },
			"spec.suspend", "spec.suspend needs spec.guest.stateClaim: name a Filesystem claim"},
		{"root disk on an overlay", func(v *vmv1.VirtualMachine) { v.Spec.Guest.RootDisk.PersistentVolumeClaim = nil },
			"spec.guest.stateClaim", "needs the root disk on a claim (spec.guest.rootDisk.persistentVolumeClaim)"},
		{"an emptyDisk", func(v *vmv1.VirtualMachine) {
			v.Spec.Guest.Disks = append(v.Spec.Guest.Disks, vmv1.Disk{Name: "scratch", EmptyDisk: &vmv1.EmptyDiskSource{Size: *q("1Gi")}})
		}, "spec.guest.stateClaim", "cannot go with an emptyDisk"},
		{"the root disk's claim", func(v *vmv1.VirtualMachine) { v.Spec.Guest.StateClaim.ClaimName = v.Name + "-root" },
			"spec.guest.stateClaim.claimName", "names a claim a disk uses"},
		{"a data disk's claim", func(v *vmv1.VirtualMachine) { v.Spec.Guest.StateClaim.ClaimName = v.Name + "-data" },
			"spec.guest.stateClaim.claimName", "names a claim a disk uses"},
		{"the Pod network mode", func(v *vmv1.VirtualMachine) { v.Spec.Guest.NetworkMode = vmv1.NetworkPod },
			"spec.guest.stateClaim", "needs spec.guest.networkMode Masquerade"},
		{"cloud-hypervisor", func(v *vmv1.VirtualMachine) { v.Spec.Provider = vmv1.ProviderCloudHypervisor },
			"spec.guest.stateClaim", "is for provider qemu"},
		{"not a claim name", func(v *vmv1.VirtualMachine) { v.Spec.Guest.StateClaim.ClaimName = "Web_State" },
			"spec.guest.stateClaim.claimName", "must be a PersistentVolumeClaim name"},
		{"config and image disks beside it", func(v *vmv1.VirtualMachine) {
			v.Spec.Guest.Disks = append(v.Spec.Guest.Disks, vmv1.Disk{Name: "conf", ConfigMap: &vmv1.ConfigMapDiskSource{Name: "conf"}})
		}, "", ""},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vm := suspendable(fmt.Sprintf("suspend-%d", i))
			tc.mutate(vm)
			err := env.Client.Create(ctx, vm)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			refused(t, err, true, tc.field, tc.hint)
		})
	}
}
