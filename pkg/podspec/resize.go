package podspec

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// resizePolicy lets the kubelet resize the runner in place: a restart would lose the guest, and
// the runner itself hands the guest its new CPUs and memory (the node agent asks it to).
func resizePolicy() []corev1.ContainerResizePolicy {
	return []corev1.ContainerResizePolicy{
		{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
		{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.NotRequired},
	}
}

// RunnerResources are the runner container's resources in pod.
func RunnerResources(pod *corev1.Pod) corev1.ResourceRequirements {
	if c := runnerpod.Container(pod); c != nil {
		return c.Resources
	}
	return corev1.ResourceRequirements{}
}
