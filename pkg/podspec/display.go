package podspec

import (
	"k8s.io/apimachinery/pkg/api/resource"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// HasDisplay says vm's guest gets a display (runnerconfig's --display=vnc): VNC unless its spec
// says None, for provider qemu; cloud-hypervisor has no VNC server. The runner's flag defaults
// to none, so a pod made before displays, and a migration target copying its argv, keeps a
// guest without one.
func HasDisplay(vm *vmv1.VirtualMachine) bool {
	return vm.Spec.Provider == vmv1.ProviderQEMU && vm.Spec.Guest.Display != vmv1.DisplayNone
}

// displayMemory is what the display's VGA card adds to the pod's memory: its video memory,
// which QEMU allocates beside the guest's RAM.
func displayMemory(vm *vmv1.VirtualMachine) resource.Quantity {
	if !HasDisplay(vm) {
		return resource.Quantity{}
	}
	return *resource.NewQuantity(vmv1.DisplayOverheadMiB<<20, resource.BinarySI)
}
