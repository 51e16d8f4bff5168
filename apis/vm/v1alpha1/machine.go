package v1alpha1

import "regexp"

// MachineType matches a q35 machine type the runner passes to QEMU: the alias, or a versioned
// one (status.machine's pattern, without the alias). Nothing else reaches -machine, whose value
// is an option list.
var MachineType = regexp.MustCompile(`^(q35|pc-q35-[0-9]{1,2}\.[0-9]{1,2})$`)

// qemuRelease is a QEMU version's release: its major and minor numbers.
var qemuRelease = regexp.MustCompile(`^(\d{1,2})\.(\d{1,2})\.\d+`)

// MachineForQEMU is the versioned machine type QEMU's q35 stands for in the QEMU of version
// (7.2.22 → pc-q35-7.2): q35 is always its own release's newest. "" when version is not a QEMU
// version (a provider that reported none).
func MachineForQEMU(version string) string {
	m := qemuRelease.FindStringSubmatch(version)
	if m == nil {
		return ""
	}
	return "pc-q35-" + m[1] + "." + m[2]
}
