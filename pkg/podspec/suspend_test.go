package podspec_test

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
	goldenfile "github.com/virtpod/virtpod/tests/golden"
)

// suspendableVM has its root and data disks on claims and a state claim of its own.
func suspendableVM() (*vmv1.VirtualMachine, podspec.Options) {
	vm, opts := baseVM(), podspec.DefaultOptions()
	vm.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "web-root"}
	vm.Spec.Guest.Disks = []vmv1.Disk{{Name: "data", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "web-data"}}}
	vm.Spec.Guest.StateClaim = &vmv1.StateClaim{ClaimName: "web-state"}
	opts.Claims = claims()
	opts.Claims["web-state"] = podspec.Claim{SizeMiB: 1536}
	return vm, opts
}

// TestSuspendGolden: a VM with a state claim mounts it and tells the runner where a suspend
// saves the guest; once a state is saved (status.suspendedState) its next pod resumes from it.
func TestSuspendGolden(t *testing.T) {
	saved := func(vm *vmv1.VirtualMachine) {
		vm.Status.SuspendedState = &vmv1.SuspendedState{ClaimName: "web-state", SavedAt: metav1.Unix(1764547200, 0), PodName: "web-runner", Node: "node-a"}
	}
	for name, mutate := range map[string]func(*vmv1.VirtualMachine){
		"suspendable":  func(*vmv1.VirtualMachine) {},
		"resume-state": saved,
	} {
		t.Run(name, func(t *testing.T) {
			vm, opts := suspendableVM()
			mutate(vm)
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

// TestResumes: only a state saved on the claim the spec names now is resumed from; a VM
// pointed at another state claim since boots afresh.
func TestResumes(t *testing.T) {
	vm, opts := suspendableVM()
	if podspec.Resumes(vm) || podspec.ResumedFrom(podspec.Build(vm, opts)) {
		t.Fatal("nothing saved, yet a resume")
	}
	if !podspec.CanSuspend(podspec.Build(vm, opts)) {
		t.Fatal("a VM with a state claim gets a pod that cannot suspend")
	}
	vm.Status.SuspendedState = &vmv1.SuspendedState{ClaimName: "web-state"}
	if !podspec.Resumes(vm) || !podspec.ResumedFrom(podspec.Build(vm, opts)) {
		t.Fatal("a saved state is not resumed from")
	}
	vm.Spec.Guest.StateClaim.ClaimName = "web-state-2"
	if podspec.Resumes(vm) {
		t.Error("a state on a claim the spec no longer names is resumed from")
	}
	vm.Spec.Guest.StateClaim = nil
	if p := podspec.Build(vm, opts); podspec.Resumes(vm) || podspec.CanSuspend(p) || podspec.ResumedFrom(p) {
		t.Error("a VM without a state claim suspends or resumes")
	}
}

// TestTargetPodDropsState: a migration's target neither resumes from the state nor mounts the
// state claim (a second node may not attach it); everything else is the source's.
func TestTargetPodDropsState(t *testing.T) {
	vm, opts := suspendableVM()
	vm.Status.SuspendedState = &vmv1.SuspendedState{ClaimName: "web-state"}
	src := podspec.Build(vm, opts) // a resumed guest's pod, started from the state
	src.Spec.NodeName = "node-a"
	target := podspec.TargetPod(src, migration(""), "", "")
	if podspec.CanSuspend(target) || podspec.ResumedFrom(target) {
		t.Errorf("target's runner args %v: want neither %s nor %s", target.Spec.Containers[0].Args, podspec.SuspendFlag, podspec.ResumeFlag)
	}
	for _, v := range target.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "web-state" {
			t.Errorf("the target mounts the state claim (volume %s)", v.Name)
		}
	}
	for _, m := range target.Spec.Containers[0].VolumeMounts {
		if strings.HasPrefix(m.MountPath, vmv1.StateMount) {
			t.Errorf("the target mounts %s", m.MountPath)
		}
	}
	if _, err := runnerconfigtest.Parse(target.Spec.Containers[0].Args); err != nil {
		t.Errorf("the runner refuses the target's flags: %v", err)
	}
	if !slices.Contains(src.Spec.Containers[0].Args, podspec.ResumeFlag+"="+vmv1.StateFile) {
		t.Error("TargetPod changed the source pod's args")
	}
}
