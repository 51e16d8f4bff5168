package podspec_test

import (
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	goldenfile "github.com/virtpod/virtpod/tests/golden"
)

// TestTargetClaimName: deterministic per migration and claim, different for another migration
// or claim, a valid claim name however long the source's, and a hop's suffix replaced by the
// next hop's rather than added to it.
func TestTargetClaimName(t *testing.T) {
	a := podspec.TargetClaimName("web-root", "uid-1")
	if a != podspec.TargetClaimName("web-root", "uid-1") || !strings.HasPrefix(a, "web-root-m") || len(a) != len("web-root-m")+5 {
		t.Fatalf("TargetClaimName(web-root, uid-1) = %q", a)
	}
	if b := podspec.TargetClaimName("web-root", "uid-2"); b == a {
		t.Errorf("another migration, the same name %q", b)
	}
	if c := podspec.TargetClaimName("web-data", "uid-1"); c == a || !strings.HasPrefix(c, "web-data-m") {
		t.Errorf("another claim: %q", c)
	}
	next := podspec.TargetClaimName(a, "uid-2")
	if !strings.HasPrefix(next, "web-root-m") || len(next) != len(a) {
		t.Errorf("the next hop's name %q: want web-root-m plus 5 hex digits", next)
	}
	long := podspec.TargetClaimName(strings.Repeat("a", 253), "uid-1")
	if len(long) != 253 {
		t.Errorf("from a 253-character claim: %d characters", len(long))
	}
}

// TestTargetClaimGolden: the target's claim keeps what decides where and how the disk lives
// (class, modes, volume mode) and the source's capacity as its request; nothing of the source's
// volume, selector or data source; owned by the migration.
func TestTargetClaimGolden(t *testing.T) {
	block := corev1.PersistentVolumeBlock
	src := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web-root", UID: "pvc-uid", Labels: map[string]string{"team": "a"},
			Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To("local-path"),
			VolumeMode:       &block,
			VolumeName:       "pvc-1234",
			Selector:         &metav1.LabelSelector{MatchLabels: map[string]string{"disk": "fast"}},
			DataSource:       &corev1.TypedLocalObjectReference{Kind: "VolumeSnapshot", Name: "snap"},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}},
	}
	got, err := yaml.Marshal(podspec.TargetClaim(src, migration("")))
	if err != nil {
		t.Fatal(err)
	}
	goldenfile.Check(t, "migration-target-claim.golden.yaml", got)
}

// TestTargetPodUsesTargetClaims: the target pod mounts the claims the migration made in place of
// those it copies, and the others (shared, read-only) as the source does.
func TestTargetPodUsesTargetClaims(t *testing.T) {
	src := runningSource(t, nil)
	src.Spec.Volumes = append(src.Spec.Volumes,
		corev1.Volume{Name: "root-claim", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "web-root"}}},
		corev1.Volume{Name: "disk-shared", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "shared"}}})
	mig := migration("")
	mig.Status.Claims = []vmv1.MigratedClaim{{Disk: vmv1.RootDiskName, Source: "web-root", Target: "web-root-mabcde"}}
	claims := map[string]string{}
	for _, v := range podspec.TargetPod(src, mig, "", "").Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
	}
	if claims["root-claim"] != "web-root-mabcde" || claims["disk-shared"] != "shared" {
		t.Errorf("target pod's claims %v: want root-claim on web-root-mabcde, disk-shared on shared", claims)
	}
	if src.Spec.Volumes[len(src.Spec.Volumes)-2].PersistentVolumeClaim.ClaimName != "web-root" {
		t.Error("TargetPod changed the source pod's claim")
	}
}

// A restore's claim: its own suffix, replaced rather than added to by the next restore, never
// over 253 characters, and not a migration's.
func TestRestoredClaimName(t *testing.T) {
	a := podspec.RestoredClaimName("db-root", "uid-1")
	if !regexp.MustCompile(`^db-root-r[0-9a-f]{5}$`).MatchString(a) || a != podspec.RestoredClaimName("db-root", "uid-1") {
		t.Fatalf("%s: want db-root-r and 5 hex digits, the same each time", a)
	}
	if b := podspec.RestoredClaimName(a, "uid-2"); !strings.HasPrefix(b, "db-root-r") || len(b) != len(a) {
		t.Errorf("%s restored again is %s: want the suffix replaced", a, b)
	}
	if m := podspec.TargetClaimName("db-root", "uid-1"); m == a {
		t.Errorf("a migration and a restore of one UID name the same claim %s", m)
	}
	if long := podspec.RestoredClaimName(strings.Repeat("a", 253), "uid-1"); len(long) != 253 {
		t.Errorf("%d characters, want 253", len(long))
	}
}
