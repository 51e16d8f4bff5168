package podspec_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	goldenfile "github.com/virtpod/virtpod/tests/golden"
)

// The copier pods of a snapshot: one serving targets to a running guest on its node (built on
// an earlier snapshot), one copying a stopped VM's claims.
func TestCopierPod(t *testing.T) {
	owner := metav1.OwnerReference{APIVersion: vmv1.GroupVersion.String(), Kind: "VirtualMachineSnapshot", Name: "s2", UID: "uid-s2", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	cases := map[string]podspec.Copier{
		"copier-target": {Name: "s2-snapshot", Namespace: "ns", Of: "s2", VMName: "db", Image: "localhost/virtpod/runner:dev", Owner: owner,
			Node: "node-a", Control: true, Args: []string{"disk-target", "--control-dir=/run/virtpod/control",
				"--target=drive=root,file=" + podspec.CopierDisk("s2-root") + ",base=" + podspec.CopierDisk("s1-root")},
			Claims: []podspec.CopierClaim{{Name: "s1-root", ReadOnly: true}, {Name: "s2-root"}}},
		"copier-copy": {Name: "cold-snapshot", Namespace: "ns", Of: "cold", VMName: "web", Image: "registry.example.com/virtpod/runner@sha256:0123", Owner: owner,
			Args:   []string{"disk-copy", "--copy=from=" + podspec.CopierDisk("web-root") + ",to=" + podspec.CopierDisk("cold-root")},
			Claims: []podspec.CopierClaim{{Name: "web-root", ReadOnly: true}, {Name: "cold-root"}}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := yaml.Marshal(podspec.CopierPod(c))
			if err != nil {
				t.Fatal(err)
			}
			goldenfile.Check(t, name+".golden.yaml", got)
		})
	}
}

func TestSnapshotClaimName(t *testing.T) {
	long := string(make([]byte, 250))
	for i := range []byte(long) {
		long = long[:i] + "a" + long[i+1:]
	}
	for _, c := range []struct{ snap, disk string }{{"s1", "root"}, {long, "data"}, {long, "other"}} {
		n := podspec.SnapshotClaimName(c.snap, c.disk)
		if len(n) > 253 {
			t.Errorf("%d characters: over a claim name's 253", len(n))
		}
	}
	if a, b := podspec.SnapshotClaimName(long, "data"), podspec.SnapshotClaimName(long, "other"); a == b {
		t.Errorf("two disks of one long-named snapshot got one claim name %s", a)
	}
	if n := podspec.SnapshotClaimName("s1", "root"); n != "s1-root" {
		t.Errorf("%s, want s1-root", n)
	}
}
