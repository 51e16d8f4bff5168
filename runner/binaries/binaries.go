// Package binaries names the programs the runner image carries (the hypervisors and qemu-img)
// and where they are: the runner runs them, the node agent probes them, tools/imagebuild puts
// them there. One list, so the agent probes exactly what the runner will run.
package binaries

import "os"

// Names, as the "provider binary not found" messages name them.
const (
	QEMUName            = "qemu-system-x86_64"
	QEMUImgName         = "qemu-img"
	CloudHypervisorName = "cloud-hypervisor"
	VirtiofsdName       = "virtiofsd"
)

// Paths in the runner image: Debian's, which the image keeps so that the data, firmware and
// module directories compiled into Debian's QEMU stay right.
const (
	QEMU            = "/usr/bin/" + QEMUName
	QEMUImg         = "/usr/bin/" + QEMUImgName
	CloudHypervisor = "/usr/bin/" + CloudHypervisorName
	// Virtiofsd serves a guest's virtio-fs shares: Debian 13's virtiofsd package (1.13) puts it
	// here; Debian 12 has none, so only the Debian 13 runner image carries it.
	Virtiofsd = "/usr/libexec/" + VirtiofsdName
	// QEMUModuleDir is Debian's QEMU module directory.
	QEMUModuleDir = "/usr/lib/x86_64-linux-gnu/qemu"
	// TCGModule is Debian's TCG accelerator module in QEMUModuleDir; without it `-accel tcg`
	// (an Emulated VM) fails.
	TCGModule = "accel-tcg-x86_64.so"
)

// Firmware for guests that boot from their disk (no kernel image), from Debian's seabios and ovmf
// packages, at Debian's paths.
const (
	// SeaBIOS is the BIOS Debian's QEMU loads for q35 by default (its firmware path lists
	// /usr/share/seabios); the runner names it with -bios so the choice is explicit.
	SeaBIOS = "/usr/share/seabios/bios-256k.bin"
	// OVMFCode is OVMF's code without secure boot, mapped read-only into every UEFI guest.
	OVMFCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	// OVMFVars is the empty variable store (no secure-boot keys enrolled) each UEFI guest gets
	// a writable copy of; its size matches OVMFCode's 4 MiB build.
	OVMFVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
	// CloudHypervisorFirmware is cloud-hypervisor's UEFI firmware (its OVMF build, CLOUDHV.fd),
	// which Debian does not package: an image that carries cloud-hypervisor puts it here.
	CloudHypervisorFirmware = "/usr/share/cloud-hypervisor/CLOUDHV.fd"
)

// FirmwarePackages names the Debian package of each firmware file, for "install ..." messages.
var FirmwarePackages = map[string]string{SeaBIOS: "seabios", OVMFCode: "ovmf", OVMFVars: "ovmf"}

// Environment variables that move a binary without changing a pod's flags (tests, other images).
const (
	EnvQEMU            = "VIRTPOD_QEMU_BINARY"
	EnvQEMUImg         = "VIRTPOD_QEMU_IMG_BINARY"
	EnvCloudHypervisor = "VIRTPOD_CLOUD_HYPERVISOR_BINARY"
	EnvVirtiofsd       = "VIRTPOD_VIRTIOFSD_BINARY"
)

// Paths are where the runner (or the agent) finds each program.
type Paths struct {
	QEMU, QEMUImg, CloudHypervisor, Virtiofsd string
}

// FromEnv is the image's paths, each replaced by its environment variable when that is set:
// the default of the runner's and the agent's --*-binary flags.
func FromEnv() Paths {
	return Paths{
		QEMU:            envOr(EnvQEMU, QEMU),
		QEMUImg:         envOr(EnvQEMUImg, QEMUImg),
		CloudHypervisor: envOr(EnvCloudHypervisor, CloudHypervisor),
		Virtiofsd:       envOr(EnvVirtiofsd, Virtiofsd),
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
