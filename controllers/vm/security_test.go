package vm_test

import (
	"context"
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

// TestRunnerPodsAdmittedAtRestricted: in a namespace that enforces Pod Security restricted,
// the strictest level, the API server's own admission lets the runner pod in: kernel and
// firmware boots, a masquerade guest and a resizable one.
func TestRunnerPodsAdmittedAtRestricted(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vmtest-pss-", Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	kernel := kubeapi.SampleVM(ns.Name, "pss-kernel")
	firmware := kubeapi.SampleVM(ns.Name, "pss-firmware")
	firmware.Spec.Guest.KernelImage, firmware.Spec.Guest.Firmware = "", vmv1.FirmwareUEFI
	masq := kubeapi.SampleVM(ns.Name, "pss-masquerade")
	masq.Spec.Guest.NetworkMode = vmv1.NetworkMasquerade
	for _, vm := range []*vmv1.VirtualMachine{kernel, firmware, masq} {
		create(t, vm)
	}
	for _, vm := range []*vmv1.VirtualMachine{kernel, firmware, masq} {
		pod := waitPod(t, vm, "")
		if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != vmv1.RunnerUID {
			t.Errorf("%s: runner pod security context %+v", vm.Name, sc)
		}
		got := &vmv1.VirtualMachine{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vm), got); err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionReady); c != nil && c.Reason == vmv1.ReasonPodSecurityForbidden {
			t.Errorf("%s: %s", vm.Name, c.Message)
		}
	}
	// A pod that wants what a runner no longer does is still refused there: the level holds.
	bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "wants-net-admin"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "c", Image: "example.com/x", SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}}}}}}
	if err := env.Client.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "PodSecurity") {
		t.Errorf("a pod adding NET_ADMIN in a restricted namespace: %v, want Pod Security's refusal", err)
	}
}
