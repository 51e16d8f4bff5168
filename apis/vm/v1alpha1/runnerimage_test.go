package v1alpha1_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestRunnerImagePolicy installs config/admission's ValidatingAdmissionPolicy and holds it and
// ProviderClassSpec.AllowsRunnerImage (which the controller uses) to one table: a VM names a
// runner image only when its ProviderClass allows it, and a refusal lists what is allowed.
func TestRunnerImagePolicy(t *testing.T) {
	ctx := context.Background()
	installPolicy(t, ctx)
	class := &vmv1.ProviderClass{
		ObjectMeta: metav1.ObjectMeta{Name: string(vmv1.ProviderCloudHypervisor)},
		Spec: vmv1.ProviderClassSpec{
			Handler:             vmv1.ProviderCloudHypervisor,
			RunnerImage:         "registry.example.com/virtpod/runner:v2",
			AllowedRunnerImages: []string{"registry.example.com/virtpod/runner", "localhost/custom/runner:v1"},
		},
	}
	if err := env.Client.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, class) })
	vm := func(image string) *vmv1.VirtualMachine {
		v := kubeapi.SampleVM("default", "runner-image")
		v.Spec.Provider, v.Spec.Acceleration = vmv1.ProviderCloudHypervisor, vmv1.AccelerationKVM
		v.Spec.RunnerImage = image
		return v
	}
	// The policy's parameters come from an informer: wait until it refuses.
	evil := "evil.example.com/runner:v1"
	kubeapi.Eventually(t, "the runner-image policy in force", 30*time.Second, func() error {
		if err := env.Client.Create(ctx, vm(evil), client.DryRunAll); err == nil {
			return errors.New("an unlisted runner image was admitted")
		}
		return nil
	})

	digest := "@sha256:" + strings.Repeat("a", 64)
	for _, tc := range []struct {
		image string
		allow bool
	}{
		{"", true},
		{"registry.example.com/virtpod/runner:v2", true}, // the class's own
		{"registry.example.com/virtpod/runner:v9", true}, // a listed repository, any tag
		{"registry.example.com/virtpod/runner" + digest, true},
		{"registry.example.com/virtpod/runner", true},
		{"registry.example.com/virtpod/runner-evil:v1", false}, // a prefix is not the repository
		{"registry.example.com/virtpod/runner/sub:v1", false},
		{"localhost/custom/runner:v1", true}, // a listed image, exactly
		{"localhost/custom/runner:v2", false},
		{"localhost/custom/runner", false},
		{evil, false},
	} {
		if got := class.Spec.AllowsRunnerImage(tc.image); got != tc.allow {
			t.Errorf("AllowsRunnerImage(%q) = %v, want %v", tc.image, got, tc.allow)
		}
		err := env.Client.Create(ctx, vm(tc.image), client.DryRunAll)
		switch {
		case tc.allow && err != nil:
			t.Errorf("runner image %q refused: %v", tc.image, err)
		case !tc.allow && err == nil:
			t.Errorf("runner image %q admitted", tc.image)
		case !tc.allow:
			for _, want := range []string{"spec.runnerImage", tc.image, "ProviderClass cloud-hypervisor",
				"allowed: registry.example.com/virtpod/runner, localhost/custom/runner:v1", "spec.allowedRunnerImages"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal of %q lacks %q: %v", tc.image, want, err)
				}
			}
		}
	}

	// An update to a disallowed image is refused too.
	ok := vm("localhost/custom/runner:v1")
	if err := env.Client.Create(ctx, ok); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, ok) })
	ok.Spec.RunnerImage = evil
	if err := env.Client.Update(ctx, ok); err == nil || !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("an update to an unlisted runner image: %v, want a refusal", err)
	}

	// With no provider yet, the default class decides.
	noProvider := kubeapi.SampleVM("default", "runner-image-default")
	noProvider.Spec.RunnerImage = evil
	if err := env.Client.Create(ctx, noProvider, client.DryRunAll); err != nil {
		t.Fatalf("with no default class, nothing refuses: %v", err)
	}
	class.Annotations = map[string]string{vmv1.AnnotationDefaultClass: "true"}
	if err := env.Client.Update(ctx, class); err != nil {
		t.Fatal(err)
	}
	kubeapi.Eventually(t, "the default class's list applied to a VM with no provider", 30*time.Second, func() error {
		err := env.Client.Create(ctx, noProvider, client.DryRunAll)
		if err == nil {
			return errors.New("admitted")
		}
		if !strings.Contains(err.Error(), "ProviderClass cloud-hypervisor") {
			return fmt.Errorf("refused for another reason: %v", err)
		}
		return nil
	})
}

// installPolicy creates the policies and bindings exactly as config/admission ships them.
func installPolicy(t *testing.T, ctx context.Context) {
	t.Helper()
	remove, err := env.InstallAdmission(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
}
