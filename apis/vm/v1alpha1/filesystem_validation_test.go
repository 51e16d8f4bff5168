package v1alpha1_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestFilesystemFields: spec.guest.filesystems against the real API server, each refusal
// naming the field and the fix.
func TestFilesystemFields(t *testing.T) {
	ctx := context.Background()
	web := func() vmv1.Filesystem { return vmv1.Filesystem{Name: "web", EmptyDir: &vmv1.FilesystemEmptyDir{}} }
	cases := []struct {
		name  string
		fs    []vmv1.Filesystem
		more  func(*vmv1.VirtualMachine)
		field string // "" when accepted
		hint  string
	}{
		{"one of each source", []vmv1.Filesystem{web(),
			{Name: "conf", ConfigMap: &vmv1.FilesystemConfigMap{Name: "app-config"}},
			{Name: "tls", Secret: &vmv1.FilesystemSecret{SecretName: "tls"}},
			{Name: "shared", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "shared", ReadOnly: true}},
			{Name: "scratch", EmptyDir: &vmv1.FilesystemEmptyDir{SizeLimit: q("1Gi")}}}, nil, "", ""},
		{"no source", []vmv1.Filesystem{{Name: "web"}}, nil, "spec.guest.filesystems[0]", "give exactly one source"},
		{"two sources", []vmv1.Filesystem{{Name: "web", EmptyDir: &vmv1.FilesystemEmptyDir{}, ConfigMap: &vmv1.FilesystemConfigMap{Name: "c"}}}, nil,
			"spec.guest.filesystems[0]", "give exactly one source"},
		{"a tag that is no DNS label", []vmv1.Filesystem{{Name: "Web_Root", EmptyDir: &vmv1.FilesystemEmptyDir{}}}, nil,
			"spec.guest.filesystems[0].name", "must be a DNS label such as web"},
		{"a tag beyond 36 bytes", []vmv1.Filesystem{{Name: strings.Repeat("a", 37), EmptyDir: &vmv1.FilesystemEmptyDir{}}}, nil,
			"spec.guest.filesystems[0].name", "36"},
		{"a duplicate tag", []vmv1.Filesystem{web(), web()}, nil, "spec.guest.filesystems[1]", "Duplicate value"},
		{"too many", slices.Collect(func(yield func(vmv1.Filesystem) bool) {
			for i := range vmv1.MaxFilesystems + 1 {
				if !yield(vmv1.Filesystem{Name: fmt.Sprintf("fs%d", i), EmptyDir: &vmv1.FilesystemEmptyDir{}}) {
					return
				}
			}
		}), nil, "spec.guest.filesystems", "must have at most 8 items"},
		{"an emptyDir beyond 1Ti", []vmv1.Filesystem{{Name: "big", EmptyDir: &vmv1.FilesystemEmptyDir{SizeLimit: q("2Ti")}}}, nil,
			"spec.guest.filesystems[0].emptyDir.sizeLimit", "between 1Mi and 1Ti"},
		{"cloud-hypervisor", []vmv1.Filesystem{web()}, func(v *vmv1.VirtualMachine) {
			v.Spec.Provider, v.Spec.Acceleration = vmv1.ProviderCloudHypervisor, vmv1.AccelerationKVM
		}, "spec.guest.filesystems", "is for provider qemu"},
		{"a state claim", []vmv1.Filesystem{web()}, func(v *vmv1.VirtualMachine) {
			s := suspendable(v.Name)
			v.Spec.Guest.RootDisk, v.Spec.Guest.StateClaim, v.Spec.Guest.NetworkMode = s.Spec.Guest.RootDisk, s.Spec.Guest.StateClaim, s.Spec.Guest.NetworkMode
		}, "spec.guest.stateClaim", "cannot go with spec.guest.filesystems"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vm := kubeapi.SampleVM("default", fmt.Sprintf("fs-%d", i))
			vm.Spec.Guest.Filesystems = tc.fs
			if tc.more != nil {
				tc.more(vm)
			}
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
