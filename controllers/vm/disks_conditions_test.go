package vm

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// TestStartingNamesSecretDisks: a pod waiting in ContainerCreating names the Secrets its disks
// mount, since virtpod reads neither Secrets nor the kubelet's events.
func TestStartingNamesSecretDisks(t *testing.T) {
	vm := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"}, Spec: vmv1.VirtualMachineSpec{
		Guest: vmv1.GuestSpec{CPUs: 1, Memory: resource.MustParse("256Mi"), KernelImage: "k:1", RootDisk: vmv1.RootDisk{Image: "d:1"},
			Disks: []vmv1.Disk{{Name: "creds", Secret: &vmv1.SecretDiskSource{SecretName: "app-creds"}}}},
	}}
	pod := podspec.Build(vm, podspec.DefaultOptions())
	pod.Spec.NodeName = "node-a"
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: vmv1.RunnerContainer,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	_, msg := startingReason(pod)
	if want := `the pod mounts Secret "app-creds" for disks: if one is missing, the pod's FailedMount event says so`; !strings.Contains(msg, want) {
		t.Fatalf("startingReason message %q lacks %q", msg, want)
	}
}

// TestWantsToRun: a VM keeps its claim against a younger one unless it is halted or has ended
// for good; a guest that ended under a strategy that restarts it (a pod deleted under Always
// shows Succeeded until the restart is counted) still wants to run.
func TestWantsToRun(t *testing.T) {
	for _, tc := range []struct {
		strategy vmv1.RunStrategy
		phase    vmv1.Phase
		want     bool
	}{
		{vmv1.RunAlways, vmv1.PhaseRunning, true},
		{vmv1.RunAlways, vmv1.PhasePending, true},
		{vmv1.RunAlways, vmv1.PhaseSucceeded, true},
		{vmv1.RunAlways, vmv1.PhaseFailed, true},
		{vmv1.RunRerunOnFailure, vmv1.PhaseFailed, true},
		{vmv1.RunRerunOnFailure, vmv1.PhaseSucceeded, false},
		{vmv1.RunOnce, vmv1.PhaseSucceeded, false},
		{vmv1.RunManual, vmv1.PhaseFailed, false},
		{vmv1.RunHalted, vmv1.PhaseRunning, false},
	} {
		vm := &vmv1.VirtualMachine{Spec: vmv1.VirtualMachineSpec{RunStrategy: tc.strategy}, Status: vmv1.VirtualMachineStatus{Phase: tc.phase}}
		if got := wantsToRun(vm); got != tc.want {
			t.Errorf("%s in phase %s: wantsToRun %v, want %v", tc.strategy, tc.phase, got, tc.want)
		}
	}
}
