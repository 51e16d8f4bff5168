package podspec_test

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
)

// TestDisplay: a qemu guest gets a display unless its spec says None, rendered explicitly
// (the runner's default is none, for the pods made before displays), and the pod's memory
// grows by its video memory; a cloud-hypervisor guest has none, whatever its spec.
func TestDisplay(t *testing.T) {
	for _, tc := range []struct {
		name     string
		provider vmv1.Provider
		display  vmv1.Display
		want     bool
	}{
		{"qemu, display unset", vmv1.ProviderQEMU, "", true},
		{"qemu, VNC", vmv1.ProviderQEMU, vmv1.DisplayVNC, true},
		{"qemu, None", vmv1.ProviderQEMU, vmv1.DisplayNone, false},
		{"cloud-hypervisor", vmv1.ProviderCloudHypervisor, "", false},
	} {
		vm := baseVM()
		vm.Spec.Provider, vm.Spec.Guest.Display = tc.provider, tc.display
		args := podspec.RunnerConfig(vm).Args()
		if podspec.HasDisplay(vm) != tc.want || slices.Contains(args, "--display=vnc") != tc.want {
			t.Errorf("%s: display %v, args %q; want %v", tc.name, podspec.HasDisplay(vm), args, tc.want)
		}
		mem := podspec.Build(vm, podspec.DefaultOptions()).Spec.Containers[0].Resources.Limits.Memory()
		want := resource.MustParse("1088Mi") // 1Gi + the runner's 64Mi
		if tc.want {
			want = resource.MustParse("1104Mi") // + the VGA's 16Mi
		}
		if mem.Cmp(want) != 0 {
			t.Errorf("%s: memory limit %s, want %s", tc.name, mem, want.String())
		}
	}
}

// TestMigrationKeepsNoDisplay: a guest started by a runner pod made before displays (no
// --display) moves onto a target that builds none either, as the two QEMUs' devices must match,
// though the VM's spec now means VNC; the runner reads the missing flag as none.
func TestMigrationKeepsNoDisplay(t *testing.T) {
	src := runningSource(t, nil)
	c := &src.Spec.Containers[0]
	c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return a == "--display=vnc" })
	target := podspec.TargetPod(src, migration(""), "pc-q35-7.2", "")
	args := target.Spec.Containers[0].Args
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--display") }) {
		t.Errorf("the target of a source without a display: %q", args)
	}
	cfg, err := runnerconfigtest.Parse(args)
	if err != nil || cfg.Display != runnerconfig.DisplayNone {
		t.Errorf("the target's runner reads display %q, %v; want none", cfg.Display, err)
	}
	// A source with a display hands it on.
	if args := podspec.TargetPod(runningSource(t, nil), migration(""), "", "").Spec.Containers[0].Args; !slices.Contains(args, "--display=vnc") {
		t.Errorf("the target of a source with a display: %q", args)
	}
}
