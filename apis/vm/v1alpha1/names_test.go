package v1alpha1_test

import (
	"slices"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// The names the controller watches and checks: each object once, in the order the spec gives
// them (root disk first, state claim last), and none for a guest without any.
func TestObjectNames(t *testing.T) {
	claim := func(n string) *vmv1.ClaimDiskSource { return &vmv1.ClaimDiskSource{ClaimName: n} }
	g := vmv1.GuestSpec{
		RootDisk: vmv1.RootDisk{PersistentVolumeClaim: &vmv1.RootDiskClaim{ClaimName: "root"}},
		Disks: []vmv1.Disk{
			{Name: "a", PersistentVolumeClaim: claim("data")},
			{Name: "b", ConfigMap: &vmv1.ConfigMapDiskSource{Name: "cfg"}},
			{Name: "c", Secret: &vmv1.SecretDiskSource{SecretName: "tls"}},
			{Name: "d", PersistentVolumeClaim: claim("root")},
		},
		Filesystems: []vmv1.Filesystem{
			{Name: "e", PersistentVolumeClaim: claim("data")},
			{Name: "f", PersistentVolumeClaim: claim("shared")},
			{Name: "g", ConfigMap: &vmv1.FilesystemConfigMap{Name: "cfg"}},
			{Name: "h", ConfigMap: &vmv1.FilesystemConfigMap{Name: "site"}},
			{Name: "i", Secret: &vmv1.FilesystemSecret{SecretName: "tls"}},
		},
		StateClaim: &vmv1.StateClaim{ClaimName: "state"},
	}
	for _, c := range []struct {
		what      string
		got, want []string
	}{
		{"claims", g.ClaimNames(), []string{"root", "data", "shared", "state"}},
		{"ConfigMaps", g.ConfigMapNames(), []string{"cfg", "site"}},
		{"Secrets", g.SecretNames(), []string{"tls"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: %q, want %q", c.what, c.got, c.want)
		}
	}
	var none vmv1.GuestSpec
	if a, b, c := none.ClaimNames(), none.ConfigMapNames(), none.SecretNames(); a != nil || b != nil || c != nil {
		t.Errorf("a guest without claims, ConfigMaps or Secrets names %q %q %q", a, b, c)
	}
}
