package v1alpha1_test

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

func claimDisk(name, claim string) vmv1.Disk {
	return vmv1.Disk{Name: name, PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: claim}}
}

func emptyDisk(name, size string) vmv1.Disk {
	return vmv1.Disk{Name: name, EmptyDisk: &vmv1.EmptyDiskSource{Size: resource.MustParse(size)}}
}

// TestRejectsBadDisks applies each invalid disk list to the real API server: the error names the
// field and says what to do.
func TestRejectsBadDisks(t *testing.T) {
	ctx := context.Background()
	disks := func(d ...vmv1.Disk) func(*vmv1.VirtualMachine) {
		return func(v *vmv1.VirtualMachine) { v.Spec.Guest.Disks = d }
	}
	cases := []struct {
		name   string
		mutate func(*vmv1.VirtualMachine)
		field  string
		hint   string
	}{
		{"duplicate names", disks(claimDisk("data", "a"), emptyDisk("data", "1Gi")), "spec.guest.disks", "unique name"},
		{"no source", disks(vmv1.Disk{Name: "data"}), "spec.guest.disks[0]", "exactly one source"},
		{"two sources", disks(vmv1.Disk{Name: "data", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "a"},
			ConfigMap: &vmv1.ConfigMapDiskSource{Name: "b"}}), "spec.guest.disks[0]", "exactly one source"},
		{"named like the root disk", disks(emptyDisk("root", "1Gi")), "spec.guest.disks[0].name", "choose another name"},
		{"named like the seed", disks(emptyDisk("cidata", "1Gi")), "spec.guest.disks[0].name", "choose another name"},
		{"name not a DNS label", disks(emptyDisk("Data_1", "1Gi")), "spec.guest.disks[0].name", "DNS label such as data"},
		{"name longer than a serial", disks(emptyDisk("a-name-of-21-letterss", "1Gi")), "spec.guest.disks[0].name", "may not be more than 20"},
		{"empty disk too small", disks(emptyDisk("scratch", "512Ki")), "spec.guest.disks[0].emptyDisk.size", "between 1Mi and 1Ti"},
		{"empty disk too large", disks(emptyDisk("scratch", "2Ti")), "spec.guest.disks[0].emptyDisk.size", "between 1Mi and 1Ti"},
		{"claim name not a name", disks(claimDisk("data", "Data!")), "spec.guest.disks[0].persistentVolumeClaim.claimName", "PersistentVolumeClaim name"},
		{"empty claim name", disks(claimDisk("data", "")), "spec.guest.disks[0].persistentVolumeClaim.claimName", "at least 1"},
		{"config map name not a name", disks(vmv1.Disk{Name: "cfg", ConfigMap: &vmv1.ConfigMapDiskSource{Name: "a/b"}}),
			"spec.guest.disks[0].configMap.name", "ConfigMap name"},
		{"secret name not a name", disks(vmv1.Disk{Name: "creds", Secret: &vmv1.SecretDiskSource{SecretName: "A"}}),
			"spec.guest.disks[0].secret.secretName", "Secret name"},
		{"image not a reference", disks(vmv1.Disk{Name: "tools", Image: &vmv1.ImageDiskSource{Ref: "https://x/y:1"}}),
			"spec.guest.disks[0].image.ref", "image reference such as"},
		{"too many disks", func(v *vmv1.VirtualMachine) {
			for i := range vmv1.MaxDisks + 1 {
				v.Spec.Guest.Disks = append(v.Spec.Guest.Disks, emptyDisk(fmt.Sprintf("d%d", i), "1Mi"))
			}
		}, "spec.guest.disks", fmt.Sprintf("must have at most %d items", vmv1.MaxDisks)},
		{"root disk with neither image nor claim", func(v *vmv1.VirtualMachine) { v.Spec.Guest.RootDisk = vmv1.RootDisk{} },
			"spec.guest.rootDisk", "give an image, a persistentVolumeClaim, or both"},
		{"root claim name not a name", func(v *vmv1.VirtualMachine) {
			v.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "Root"}
		}, "spec.guest.rootDisk.persistentVolumeClaim.claimName", "PersistentVolumeClaim name"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vm := kubeapi.SampleVM("default", fmt.Sprintf("bad-disk-%d", i))
			tc.mutate(vm)
			refused(t, env.Client.Create(ctx, vm), true, tc.field, tc.hint)
		})
	}
}

// TestAcceptsDisks: every source, a claim alone as the root disk, and a claim filled from an
// image are accepted; the disk list may change (it applies at the next start).
func TestAcceptsDisks(t *testing.T) {
	ctx := context.Background()
	vm := kubeapi.SampleVM("default", "disks")
	vm.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "disks-root"}
	vm.Spec.Guest.Disks = []vmv1.Disk{
		claimDisk("data", "data-1"),
		{Name: "shared", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "shared", ReadOnly: true}},
		emptyDisk("scratch", "1Ti"),
		{Name: "config", ConfigMap: &vmv1.ConfigMapDiskSource{Name: "app.config"}},
		{Name: "creds", Secret: &vmv1.SecretDiskSource{SecretName: "db-credentials"}},
		{Name: "a-name-of-20-letters", Image: &vmv1.ImageDiskSource{Ref: "registry.example.com/vm/tools:v1"}},
	}
	if err := env.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	vm.Spec.Guest.Disks = vm.Spec.Guest.Disks[1:]
	vm.Spec.Guest.RootDisk.Image = ""
	if err := env.Client.Update(ctx, vm); err != nil {
		t.Fatalf("a disk-list change or a root claim alone was refused: %v", err)
	}
}
