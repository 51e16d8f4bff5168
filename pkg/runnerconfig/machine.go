package runnerconfig

import vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"

// MachineRun is the machine type a guest of c runs on under the QEMU of version: the pinned
// --machine, or what q35 stands for in that QEMU (its own release's newest: 10.0.13 builds
// pc-q35-10.0). "" for other providers, or a version that is not QEMU's. The runner reports it,
// so the machine pinned for the guest's later pods is the one its own image built, whatever
// QEMU the node agent's image has.
func (c Config) MachineRun(version string) string {
	if c.Provider != ProviderQEMU {
		return ""
	}
	if c.Machine != "" && c.Machine != "q35" {
		return c.Machine
	}
	return vmv1.MachineForQEMU(version)
}
