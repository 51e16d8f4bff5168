package vm

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/migratable"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// TestWantsLiveUpdate: only a LiveMigrate VM whose runner image alone changed, whose guest can
// move and is not moving already, is moved onto the new runner.
func TestWantsLiveUpdate(t *testing.T) {
	base := web(vmv1.RunAlways)
	base.Spec.Guest = vmv1.GuestSpec{CPUs: 1, Memory: resource.MustParse("256Mi"), KernelImage: "k:1", RootDisk: vmv1.RootDisk{Image: "d:1"}}
	base.Spec.ImageUpdatePolicy = vmv1.ImageUpdateLiveMigrate
	running := podspec.Build(base, podspec.DefaultOptions())
	same := podspec.PodImages(running)
	newRunner, newKernel := same, same
	newRunner.Runner, newKernel.Kernel = "virtpod/runner:v2", "k:2"
	newBoth := newRunner
	newBoth.RootDisk = "d:2"
	moving := running.DeepCopy()
	metav1.SetMetaDataAnnotation(&moving.ObjectMeta, vmv1.AnnotationMigration, "uid-m")
	onRestart := base.DeepCopy()
	onRestart.Spec.ImageUpdatePolicy = vmv1.ImageUpdateOnRestart
	movable := &migratable.Verdict{Reason: vmv1.ReasonMigratable}
	stuck := &migratable.Verdict{Reason: vmv1.ReasonDiskNotMigratable}
	for _, tc := range []struct {
		name    string
		vm      *vmv1.VirtualMachine
		moving  bool
		images  vmv1.Images
		verdict *migratable.Verdict
		want    bool
	}{
		{"new runner", base, false, newRunner, movable, true},
		{"images as they are", base, false, same, movable, false},
		{"new kernel: needs a boot", base, false, newKernel, movable, false},
		{"new runner and disk: needs a boot", base, false, newBoth, movable, false},
		{"not migratable", base, false, newRunner, stuck, false},
		{"no verdict (no guest)", base, false, newRunner, nil, false},
		{"already moving", base, true, newRunner, movable, false},
		{"OnRestart", onRestart, false, newRunner, movable, false},
	} {
		pod := running
		if tc.moving {
			pod = moving
		}
		if got := wantsLiveUpdate(tc.vm, pod, tc.images, tc.verdict); got != tc.want {
			t.Errorf("%s: wantsLiveUpdate = %v, want %v", tc.name, got, tc.want)
		}
	}
}
