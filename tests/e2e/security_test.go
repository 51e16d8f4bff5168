package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestSecurityAdmission: on the cluster as installed from config/local, a VM naming a runner
// image its ProviderClass does not list is refused with the list, and a VM in a namespace whose
// Pod Security level refuses runner pods says so instead of waiting silently.
func TestSecurityAdmission(t *testing.T) {
	ns := namespace(t)
	// The policy reads its ProviderClasses through an informer: give a fresh install a moment.
	eventually(t, "a VM naming an unlisted runner image refused with the allowed list", time.Minute, func() error {
		vm := newVM(ns, "evil-runner")
		vm.Spec.RunnerImage = "evil.example.com/runner:v1"
		err := kube.Create(context.Background(), vm, client.DryRunAll)
		if err == nil {
			return fmt.Errorf("admitted")
		}
		return contains(err.Error(), "allowed: localhost/virtpod/runner, localhost/virtpod/runner-nohypervisor")
	})

	pss := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-pss-", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}
	if err := kube.Create(context.Background(), pss); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), pss) })
	if err := kube.Create(context.Background(), newVM(pss.Name, "pss")); err != nil {
		t.Fatal(err)
	}
	readyCondition(t, pss.Name, "pss", vmv1.ConditionReady, vmv1.ReasonPodSecurityForbidden, "pod-security.kubernetes.io/enforce=privileged")
	if got := getVM(t, pss.Name, "pss"); got.Status.Phase != vmv1.PhasePending {
		t.Errorf("phase %s, want Pending", got.Status.Phase)
	}
}
