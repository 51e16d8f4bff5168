package v1alpha1_test

import (
	"context"
	"fmt"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestDisplayAccepted: every display for provider qemu (none named means VNC, and the API server
// writes nothing in), and None or nothing for cloud-hypervisor.
func TestDisplayAccepted(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		provider vmv1.Provider
		display  vmv1.Display
	}{
		{vmv1.ProviderQEMU, ""}, {vmv1.ProviderQEMU, vmv1.DisplayVNC}, {vmv1.ProviderQEMU, vmv1.DisplayNone},
		{vmv1.ProviderCloudHypervisor, ""}, {vmv1.ProviderCloudHypervisor, vmv1.DisplayNone},
	}
	for i, tc := range cases {
		vm := kubeapi.SampleVM("default", fmt.Sprintf("display-%d", i))
		vm.Spec.Provider, vm.Spec.Guest.Display = tc.provider, tc.display
		if tc.provider == vmv1.ProviderCloudHypervisor {
			vm.Spec.Acceleration = vmv1.AccelerationKVM
		}
		if err := env.Client.Create(ctx, vm); err != nil {
			t.Fatalf("%s with display %q refused: %v", tc.provider, tc.display, err)
		}
		if vm.Spec.Guest.Display != tc.display {
			t.Errorf("%s: the API server made display %q of %q", tc.provider, vm.Spec.Guest.Display, tc.display)
		}
	}
}
