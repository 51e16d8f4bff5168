package hypervisor

import (
	"net"
	"os"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Machine is the guest the runner prepared, in no hypervisor's words: its size, how it boots,
// its disks, shares and network device, and the sockets the runner reaches it on. Each driver
// translates it into its own (the QEMU driver into pkg/qemu's Spec, the cloud-hypervisor driver
// into its vm.create body), so the runner never speaks a driver's vocabulary.
type Machine struct {
	Name         string // the VM's name, shown in the process list
	Acceleration string // kvm or tcg
	// Type is the pinned machine type (QEMU's pc-q35-7.2), so a migrated guest keeps its
	// hardware; "" is the hypervisor's newest.
	Type string
	// CPUModel is the vCPU model; "" is the hypervisor's choice (host under KVM).
	CPUModel string
	vmv1.GuestSize

	Boot   Boot
	Root   Disk
	Seed   string // the cloud-init seed image (ISO 9660), read-only after the root disk; "" for none
	Disks  []Disk // data disks, after the root disk and the seed, in order
	Shares []Share
	NIC    *NIC // nil: the guest has no network

	// HotplugSlots is how many slots the guest has for disks attached and detached while it
	// runs; a Disk with Hotplug sits on one from the start.
	HotplugSlots int

	Sockets Sockets
	// SeedDirect says the seed's directory takes O_DIRECT.
	SeedDirect bool
}

// Boot is how the guest boots: a kernel directly, or firmware from its root disk.
type Boot struct {
	Kernel     string
	KernelFile *os.File // the kernel, open already (the node agent's unpacked one); nil: open Kernel
	Initrd     string   // "" for none
	Cmdline    string   // the whole kernel command line

	// Without a kernel, the firmware that boots the root disk.
	Firmware     string // bios or uefi
	FirmwareCode string // bios: the SeaBIOS image; uefi: OVMF's code (never written)
	FirmwareVars string // uefi: this guest's writable copy of OVMF's variable store
}

// Disk is one virtio disk.
type Disk struct {
	Serial   string // the guest's name for it (virtio-blk serial); "" for the root disk
	Path     string
	Format   string // raw or qcow2
	Block    bool   // Path is a block device, not a file
	ReadOnly bool
	// Direct opens it with O_DIRECT, past the host's page cache; either way the guest's
	// flushes reach the disk.
	Direct bool
	// Hotplug puts a data disk on hotplug slot Slot, where it can be detached.
	Hotplug bool
	Slot    int
}

// Share is one virtio-fs share, served by its virtiofsd on Socket.
type Share struct {
	Tag    string
	Socket string
}

// NIC is the guest's network device on a tap the node agent made the runner's.
type NIC struct {
	Tap     string   // the tap's name
	TapFile *os.File // the tap, open
	MAC     net.HardwareAddr
	MTU     int
}

// Sockets are the unix sockets the hypervisor serves, all in the runner's directories.
type Sockets struct {
	Serial  string // the guest's serial console
	Control string // the hypervisor's own API (QMP, or cloud-hypervisor's REST API)
	Agent   string // the guest agent's channel; "" for none
	// Display is where the hypervisor serves the guest's screen over VNC (display.go); "" gives
	// the guest no display.
	Display string
	// Incoming makes the guest wait, paused, for its state on this socket (a migration's target,
	// or a resume from a saved state); "" boots it.
	Incoming string
}
