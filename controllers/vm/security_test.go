package vm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestRunnerImageNotAllowedHoldsVM: a VM whose runner image its ProviderClass does not allow (one
// stored before the admission policy, or whose class changed since) gets no pod and a condition
// naming what is allowed; once the admin allows the image, the pod runs it.
func TestRunnerImageNotAllowedHoldsVM(t *testing.T) {
	ns := namespace(t)
	// Stored while the admission policy was not in force.
	unbind(t, "ValidatingAdmissionPolicyBinding", "virtpod-runner-image")
	vm := kubeapi.SampleVM(ns, "own-runner")
	vm.Spec.RunnerImage = "evil.example.com/runner:v1"
	kubeapi.Eventually(t, "the runner-image policy unbound", 30*time.Second, func() error {
		return env.Client.Create(context.Background(), vm.DeepCopy(), client.DryRunAll)
	})
	create(t, vm)
	got := providerCond(t, vm, metav1.ConditionFalse, vmv1.ReasonRunnerImageNotAllowed, "spec.runnerImage evil.example.com/runner:v1 is not allowed by ProviderClass qemu (allowed: localhost/imagemap/runner)")
	if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionReady); c == nil || c.Reason != vmv1.ReasonRunnerImageNotAllowed {
		t.Errorf("Ready does not say why: %+v", c)
	}
	noPod(t, vm)

	defer editClass(t, "qemu", func(s *vmv1.ProviderClassSpec) {
		s.AllowedRunnerImages = append(s.AllowedRunnerImages, "evil.example.com/runner")
	})()
	pod := waitPod(t, vm, "")
	for _, c := range pod.Spec.Containers {
		if c.Name == vmv1.RunnerContainer && c.Image != vm.Spec.RunnerImage {
			t.Errorf("runner image %q, want the allowed %q", c.Image, vm.Spec.RunnerImage)
		}
	}
	providerCond(t, vm, metav1.ConditionTrue, vmv1.ReasonProviderAvailable, "")
}

// TestPodSecurityRefusalIsExplained: in a namespace whose Pod Security level refuses runner pods,
// the VM says so with the label to change instead of waiting silently; relabelling the namespace
// starts the pod without any change to the VM.
func TestPodSecurityRefusalIsExplained(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vmtest-pss-", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	vm := kubeapi.SampleVM(ns.Name, "pss")
	create(t, vm)
	got := condition(t, vm, vmv1.PhasePending, vmv1.ConditionReady, metav1.ConditionFalse, vmv1.ReasonPodSecurityForbidden)
	c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionReady)
	for _, want := range []string{`Pod Security level "baseline"`, "pod-security.kubernetes.io/enforce=privileged", "NET_ADMIN"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Ready's message lacks %q: %s", want, c.Message)
		}
	}
	if s := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionScheduled); s == nil || s.Reason != vmv1.ReasonPodSecurityForbidden {
		t.Errorf("Scheduled: %+v", s)
	}
	noPod(t, vm)

	eventually(t, "namespace relabelled privileged", func() error {
		fresh := &corev1.Namespace{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: ns.Name}, fresh); err != nil {
			return err
		}
		fresh.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
		if err := env.Client.Update(ctx, fresh); err != nil {
			return fmt.Errorf("update: %w", err)
		}
		return nil
	})
	waitPod(t, vm, "")
}
