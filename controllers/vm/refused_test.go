package vm_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestRefusedRunnerPodIsExplained: a VM the CRD admits but whose pod the API server refuses (here
// podResources requesting more than its limit) says so on its conditions, with the API server's
// words, and gets its pod once the spec is corrected.
func TestRefusedRunnerPodIsExplained(t *testing.T) {
	ns := namespace(t)
	vm := kubeapi.SampleVM(ns, "refused")
	vm.Spec.PodResources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
	}
	create(t, vm)
	got := condition(t, vm, vmv1.PhasePending, vmv1.ConditionReady, metav1.ConditionFalse, "RunnerPodInvalid")
	c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionReady)
	if !strings.Contains(c.Message, "must be less than or equal to cpu limit") || !strings.Contains(c.Message, "spec.podResources") {
		t.Errorf("message does not carry the API server's reason and the VM's field: %s", c.Message)
	}
	if s := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionScheduled); s == nil || s.Reason != "RunnerPodInvalid" {
		t.Errorf("Scheduled: %+v", s)
	}
	eventually(t, "spec corrected", func() error {
		fresh := getVM(t, vm)
		fresh.Spec.PodResources = nil
		return env.Client.Update(context.Background(), fresh)
	})
	waitPod(t, vm, "")
}
