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

// TestStartingNamesCloudInitSecret: a pod that waits in ContainerCreating (as one whose Secret
// cannot be mounted does, with nothing more in its status) names the Secret and keys it needs.
func TestStartingNamesCloudInitSecret(t *testing.T) {
	vm := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}, Spec: vmv1.VirtualMachineSpec{
		Guest: vmv1.GuestSpec{CPUs: 1, Memory: resource.MustParse("256Mi"), KernelImage: "k:1", RootDisk: vmv1.RootDisk{Image: "d:1"},
			CloudInit: &vmv1.CloudInit{SecretRef: vmv1.SecretReference{Name: "web-bootstrap"}, UserDataKey: "value"}},
	}}
	pod := podspec.Build(vm, podspec.DefaultOptions())
	pod.Spec.NodeName = "node-a"
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: vmv1.RunnerContainer,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	// What the kubelet reports while the Secret is missing (seen on the local cluster).
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse,
		Reason: "PodSandboxNotReady", Message: "no pod sandbox exists"}}
	reason, msg := startingReason(pod)
	want := `no pod sandbox exists; the pod mounts cloud-init Secret "web-bootstrap" (keys value): if that Secret or a key is missing, the pod's FailedMount event says so`
	if reason != vmv1.ReasonStarting || msg != want {
		t.Fatalf("startingReason = %s, %q\nwant %q", reason, msg, want)
	}
	vm.Spec.Guest.CloudInit = nil
	if _, msg := startingReason(podspec.Build(vm, podspec.DefaultOptions())); strings.Contains(msg, "Secret") {
		t.Fatalf("a VM without cloud-init: %q", msg)
	}
}
