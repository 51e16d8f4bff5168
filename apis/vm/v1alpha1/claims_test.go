package v1alpha1_test

import (
	"slices"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestClaims: Claims yields every claim the guest names with what it is for, in the spec's order
// (root disk, data disks, filesystems, state claim), a claim named twice each time, and nothing
// for the disks and filesystems of other sources; WritesClaim follows from what it yields.
func TestClaims(t *testing.T) {
	claim := func(n string, ro bool) *vmv1.ClaimDiskSource {
		return &vmv1.ClaimDiskSource{ClaimName: n, ReadOnly: ro}
	}
	rootClaim := vmv1.RootDisk{PersistentVolumeClaim: &vmv1.RootDiskClaim{ClaimName: "web-root"}}
	for _, tc := range []struct {
		name   string
		guest  vmv1.GuestSpec
		want   []vmv1.GuestClaim
		writes map[string]bool // WritesClaim of each name
	}{
		{name: "no claims", guest: vmv1.GuestSpec{
			RootDisk: vmv1.RootDisk{Image: "k/disk:1"},
			Disks:    []vmv1.Disk{{Name: "cfg", ConfigMap: &vmv1.ConfigMapDiskSource{Name: "cfg"}}},
		}, writes: map[string]bool{"cfg": false}},
		{name: "root disk only", guest: vmv1.GuestSpec{RootDisk: rootClaim},
			want:   []vmv1.GuestClaim{{Use: vmv1.ClaimRootDisk, Name: vmv1.RootDiskName, ClaimName: "web-root"}},
			writes: map[string]bool{"web-root": true, "other": false}},
		{name: "every use, in the spec's order", guest: vmv1.GuestSpec{
			RootDisk: rootClaim,
			Disks: []vmv1.Disk{
				{Name: "data", PersistentVolumeClaim: claim("data-1", false)},
				{Name: "scratch", EmptyDisk: &vmv1.EmptyDiskSource{}},
				{Name: "ref", PersistentVolumeClaim: claim("reference", true)},
			},
			Filesystems: []vmv1.Filesystem{
				{Name: "site", ConfigMap: &vmv1.FilesystemConfigMap{Name: "site"}},
				{Name: "www", PersistentVolumeClaim: claim("www", false)},
				{Name: "docs", PersistentVolumeClaim: claim("docs", true)},
			},
			StateClaim: &vmv1.StateClaim{ClaimName: "web-state"},
		}, want: []vmv1.GuestClaim{
			{Use: vmv1.ClaimRootDisk, Name: vmv1.RootDiskName, ClaimName: "web-root"},
			{Use: vmv1.ClaimDataDisk, Name: "data", ClaimName: "data-1"},
			{Use: vmv1.ClaimDataDisk, Name: "ref", ClaimName: "reference", ReadOnly: true},
			{Use: vmv1.ClaimFilesystem, Name: "www", ClaimName: "www"},
			{Use: vmv1.ClaimFilesystem, Name: "docs", ClaimName: "docs", ReadOnly: true},
			{Use: vmv1.ClaimState, ClaimName: "web-state"},
		}, writes: map[string]bool{"web-root": true, "data-1": true, "reference": false, "www": true, "docs": false, "web-state": true}},
		{name: "one claim named twice, read-only once", guest: vmv1.GuestSpec{
			Disks:       []vmv1.Disk{{Name: "a", PersistentVolumeClaim: claim("shared", true)}},
			Filesystems: []vmv1.Filesystem{{Name: "b", PersistentVolumeClaim: claim("shared", false)}},
		}, want: []vmv1.GuestClaim{
			{Use: vmv1.ClaimDataDisk, Name: "a", ClaimName: "shared", ReadOnly: true},
			{Use: vmv1.ClaimFilesystem, Name: "b", ClaimName: "shared"},
		}, writes: map[string]bool{"shared": true}},
		{name: "read-only everywhere", guest: vmv1.GuestSpec{
			Disks:       []vmv1.Disk{{Name: "a", PersistentVolumeClaim: claim("shared", true)}, {Name: "b", PersistentVolumeClaim: claim("shared", true)}},
			Filesystems: []vmv1.Filesystem{{Name: "c", PersistentVolumeClaim: claim("shared", true)}},
		}, want: []vmv1.GuestClaim{
			{Use: vmv1.ClaimDataDisk, Name: "a", ClaimName: "shared", ReadOnly: true},
			{Use: vmv1.ClaimDataDisk, Name: "b", ClaimName: "shared", ReadOnly: true},
			{Use: vmv1.ClaimFilesystem, Name: "c", ClaimName: "shared", ReadOnly: true},
		}, writes: map[string]bool{"shared": false}},
		{name: "state claim only", guest: vmv1.GuestSpec{StateClaim: &vmv1.StateClaim{ClaimName: "s"}},
			want:   []vmv1.GuestClaim{{Use: vmv1.ClaimState, ClaimName: "s"}},
			writes: map[string]bool{"s": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := slices.Collect(tc.guest.Claims()); !slices.Equal(got, tc.want) {
				t.Errorf("Claims() = %+v\nwant %+v", got, tc.want)
			}
			for name, want := range tc.writes {
				if got := tc.guest.WritesClaim(name); got != want {
					t.Errorf("WritesClaim(%q) = %v, want %v", name, got, want)
				}
			}
			// ClaimNames: the same claims, each once.
			var names []string
			for _, c := range tc.want {
				if !slices.Contains(names, c.ClaimName) {
					names = append(names, c.ClaimName)
				}
			}
			if got := tc.guest.ClaimNames(); !slices.Equal(got, names) {
				t.Errorf("ClaimNames() = %q, want %q", got, names)
			}
		})
	}
}

// TestClaimsStop: a loop that breaks off stops the walk (range-over-func would panic on a
// yield after false).
func TestClaimsStop(t *testing.T) {
	claim := func(n string) *vmv1.ClaimDiskSource { return &vmv1.ClaimDiskSource{ClaimName: n} }
	g := vmv1.GuestSpec{
		RootDisk:    vmv1.RootDisk{PersistentVolumeClaim: &vmv1.RootDiskClaim{ClaimName: "r"}},
		Disks:       []vmv1.Disk{{Name: "a", PersistentVolumeClaim: claim("a")}, {Name: "b", PersistentVolumeClaim: claim("b")}},
		Filesystems: []vmv1.Filesystem{{Name: "f", PersistentVolumeClaim: claim("f")}},
		StateClaim:  &vmv1.StateClaim{ClaimName: "s"},
	}
	all := slices.Collect(g.Claims())
	for stop := range all {
		var seen []vmv1.GuestClaim
		for c := range g.Claims() {
			seen = append(seen, c)
			if len(seen) == stop+1 {
				break
			}
		}
		if !slices.Equal(seen, all[:stop+1]) {
			t.Errorf("breaking after %d claims: saw %+v", stop+1, seen)
		}
	}
}
