package podspec_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
	goldenfile "github.com/virtpod/virtpod/tests/golden"
)

func withDisks(vm *vmv1.VirtualMachine) {
	vm.Spec.Guest.Disks = []vmv1.Disk{
		{Name: "data", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "web-data"}},
		{Name: "raw", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "web-raw"}},
		{Name: "shared", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "shared", ReadOnly: true}},
		{Name: "scratch", EmptyDisk: &vmv1.EmptyDiskSource{Size: resource.MustParse("2Gi")}},
		{Name: "config", ConfigMap: &vmv1.ConfigMapDiskSource{Name: "web-config"}},
		{Name: "creds", Secret: &vmv1.SecretDiskSource{SecretName: "web-creds"}},
		{Name: "tools", Image: &vmv1.ImageDiskSource{Ref: "registry.example.com/vm/tools:v1"}},
	}
}

func claims() map[string]podspec.Claim {
	return map[string]podspec.Claim{
		"web-data": {SizeMiB: 10240}, "web-raw": {Block: true, SizeMiB: 1024, ReadWriteMany: true}, "shared": {SizeMiB: 100, ReadOnlyMany: true},
		"web-root": {SizeMiB: 20480}, "web-root-dev": {Block: true},
	}
}

// TestDiskGolden: every source of disk, a root disk on a Filesystem claim filled from an image,
// one on a Block claim alone, and image disks copied by init containers.
func TestDiskGolden(t *testing.T) {
	cases := map[string]func(*vmv1.VirtualMachine, *podspec.Options){
		"disks-every-source": func(vm *vmv1.VirtualMachine, o *podspec.Options) { withDisks(vm); o.Claims = claims() },
		"root-claim-from-image": func(vm *vmv1.VirtualMachine, o *podspec.Options) {
			vm.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "web-root"}
			vm.Spec.Guest.RootDisk.Size = ptr.To(resource.MustParse("4Gi"))
			o.Claims = claims()
		},
		"root-block-claim-alone": func(vm *vmv1.VirtualMachine, o *podspec.Options) {
			vm.Spec.Guest.RootDisk = vmv1.RootDisk{PersistentVolumeClaim: &vmv1.RootDiskClaim{ClaimName: "web-root-dev"}}
			o.Claims = claims()
		},
		// A share of each kind: volumes at /virtpod/fs/<name>, ConfigMaps and Secrets mounted
		// whole (no subPath: the kubelet updates them in place), 16Mi more memory per share.
		"filesystems-every-source": func(vm *vmv1.VirtualMachine, o *podspec.Options) {
			vm.Spec.Guest.Filesystems = []vmv1.Filesystem{
				{Name: "web", EmptyDir: &vmv1.FilesystemEmptyDir{SizeLimit: ptr.To(resource.MustParse("1Gi"))}},
				{Name: "conf", ConfigMap: &vmv1.FilesystemConfigMap{Name: "app-config"}},
				{Name: "tls", Secret: &vmv1.FilesystemSecret{SecretName: "web-tls"}},
				{Name: "shared", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "web-shared", ReadOnly: true}},
			}
		},
		"disks-copy-images": func(vm *vmv1.VirtualMachine, o *podspec.Options) {
			vm.Spec.Guest.Disks = []vmv1.Disk{{Name: "tools", Image: &vmv1.ImageDiskSource{Ref: "registry.example.com/vm/tools:v1"}}}
			o.CopyImages = true
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			vm, opts := baseVM(), podspec.DefaultOptions()
			mutate(vm, &opts)
			pod := podspec.Build(vm, opts)
			if _, err := runnerconfigtest.Parse(pod.Spec.Containers[0].Args); err != nil {
				t.Fatalf("the runner refuses the flags: %v", err)
			}
			got, err := yaml.Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			goldenfile.Check(t, name+".golden.yaml", got)
		})
	}
}

// TestDiskFlags: the runner is told each disk's kind from its source and its claim's
// volumeMode, in the VM's order, with the claim's capacity as a file disk's size; a claim a
// second node can attach (ReadWriteMany, or ReadOnlyMany used read-only) is migrate=shared, a
// writable ReadWriteOnce one (the root claim too) migrate=copy: a migration copies it into a
// claim of the target's.
func TestDiskFlags(t *testing.T) {
	vm, opts := baseVM(), podspec.DefaultOptions()
	withDisks(vm)
	opts.Claims = claims()
	vm.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "web-root"}
	cfg, err := runnerconfigtest.Parse(podspec.Build(vm, opts).Spec.Containers[0].Args)
	if err != nil {
		t.Fatal(err)
	}
	want := []runnerconfig.Disk{
		{Name: "data", Kind: runnerconfig.DiskFile, Path: "/virtpod/disks/data", SizeMiB: 10240, Migrate: runnerconfig.MigrateCopy},
		{Name: "raw", Kind: runnerconfig.DiskBlock, Path: "/dev/virtpod/raw", Migrate: runnerconfig.MigrateShared},
		{Name: "shared", Kind: runnerconfig.DiskFile, Path: "/virtpod/disks/shared", SizeMiB: 100, ReadOnly: true, Migrate: runnerconfig.MigrateShared},
		{Name: "scratch", Kind: runnerconfig.DiskEmpty, Path: "/virtpod/disks/scratch", SizeMiB: 2048},
		{Name: "config", Kind: runnerconfig.DiskFiles, Path: "/virtpod/disks/config", ReadOnly: true},
		{Name: "creds", Kind: runnerconfig.DiskFiles, Path: "/virtpod/disks/creds", ReadOnly: true},
		{Name: "tools", Kind: runnerconfig.DiskImage, Path: "/virtpod/disks/tools/disk/root.img", ReadOnly: true},
	}
	if len(cfg.Disks) != len(want) {
		t.Fatalf("disks %+v, want %+v", cfg.Disks, want)
	}
	for i := range want {
		if cfg.Disks[i] != want[i] {
			t.Errorf("disk %d: %+v, want %+v", i, cfg.Disks[i], want[i])
		}
	}
	if r := cfg.RootVolume; r == nil || *r != (runnerconfig.Disk{Kind: runnerconfig.DiskFile, Path: "/virtpod/root", Migrate: runnerconfig.MigrateCopy}) || cfg.RootDisk == "" {
		t.Errorf("root volume %+v with image %q, want the claim's folder, filled from the image", r, cfg.RootDisk)
	}
}

// TestClaimOf: a claim's capacity once bound, its request before; Block from volumeMode; its
// access modes once bound (the volume's), those it asks for before.
func TestClaimOf(t *testing.T) {
	block := corev1.PersistentVolumeBlock
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: corev1.PersistentVolumeClaimSpec{
		VolumeMode: &block,
		Resources:  corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1G")}}}}
	if got := podspec.ClaimOf(pvc); got != (podspec.Claim{Block: true, SizeMiB: 953}) {
		t.Errorf("unbound Block claim of 1G: %+v", got)
	}
	pvc.Spec.VolumeMode = nil
	pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
	if got := podspec.ClaimOf(pvc); got != (podspec.Claim{SizeMiB: 2048}) {
		t.Errorf("bound Filesystem claim of 2Gi: %+v", got)
	}
	pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	if got := podspec.ClaimOf(pvc); got.ReadWriteMany || got.ReadOnlyMany {
		t.Errorf("ReadWriteOnce claim: %+v", got)
	}
	pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadWriteMany}
	if got := podspec.ClaimOf(pvc); !got.ReadWriteMany || got.ReadOnlyMany {
		t.Errorf("unbound claim asking for ReadWriteOnce and ReadWriteMany: %+v", got)
	}
	// Bound, the volume's modes count: it may offer fewer than were asked for.
	pvc.Status.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadOnlyMany}
	if got := podspec.ClaimOf(pvc); got.ReadWriteMany || !got.ReadOnlyMany {
		t.Errorf("claim bound to a ReadWriteOnce, ReadOnlyMany volume: %+v", got)
	}
}
