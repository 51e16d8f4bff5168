// Package qemu builds the qemu-system-x86_64 command line for one guest. It is a pure function
// of a Spec so the exact argv is reviewable in golden files; starting and supervising QEMU is
// the runner's job.
package qemu

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Cache modes the builder accepts. Both honour the guest's flush requests, so a guest that
// syncs its data has it on the host's storage; "unsafe" (which ignores flushes) is refused.
const (
	// CacheNone opens the disk with O_DIRECT: no double caching in the pod's page cache.
	CacheNone = "none"
	// CacheWriteback goes through the host page cache; used where O_DIRECT is not supported
	// (an emptyDir on tmpfs), still flushing to the host when the guest flushes.
	CacheWriteback = "writeback"
)

// Firmware a guest without a kernel boots through: its root disk's own bootloader runs.
const (
	// FirmwareBIOS is SeaBIOS, loaded with -bios.
	FirmwareBIOS = "bios"
	// FirmwareUEFI is OVMF: its code mapped read-only, its variable store a per-guest copy.
	FirmwareUEFI = "uefi"
)

// Spec is everything the command line depends on.
type Spec struct {
	Name         string // VM name, shown in the process list
	Acceleration string // "kvm" or "tcg"
	// Machine is the machine type: "" is q35 (this QEMU's newest); a versioned one
	// (pc-q35-7.2) keeps a migrating guest's hardware on another QEMU version.
	Machine string
	// CPUModel is QEMU's -cpu; "" means "host" under kvm and QEMU's default model under tcg.
	CPUModel string
	// GuestSize is the guest's size; MaxCPUs and MaxMemoryMiB above CPUs and MemoryMiB make it
	// resizable (hotplug.go), 0 or equal keeps the argv of a fixed-size guest.
	vmv1.GuestSize

	// Direct kernel boot; Kernel "" boots through Firmware instead.
	Kernel  string
	Initrd  string // "" for none
	Cmdline string // the complete kernel command line

	// Firmware boot, only without a Kernel: the root disk is the boot device.
	Firmware     string // FirmwareBIOS or FirmwareUEFI
	FirmwareCode string // bios: the SeaBIOS image; uefi: OVMF's code (never written)
	FirmwareVars string // uefi: this guest's writable copy of OVMF's variable store

	DiskPath   string // the writable root disk (the qcow2 overlay, or a claim's disk)
	DiskFormat string // qcow2 or raw
	DiskCache  string // CacheNone or CacheWriteback
	DiskBlock  bool   // DiskPath is a block device (a Block claim), not a file

	// SeedPath is a cloud-init NoCloud seed image (raw ISO 9660), attached read-only as the
	// second virtio disk; "" for none.
	SeedPath string

	// Disks are the data disks, attached after the root disk and the seed (disks.go).
	Disks []Drive
	// HotplugSlots is how many PCIe root ports the guest has for disks that come and go while it
	// runs (diskslots.go); a Drive with Hotplug sits on one. 0 keeps the argv of a guest without.
	HotplugSlots int

	// TapFD is the file descriptor number, in QEMU's process, of an open tap device;
	// 0 means the guest has no network.
	TapFD int
	MAC   net.HardwareAddr

	SerialSocket string // unix socket QEMU serves the guest's serial console on
	QMPSocket    string // unix socket QEMU serves QMP on
	// AgentSocket is the unix socket QEMU serves the guest agent's channel on (a virtio-serial
	// port named org.qemu.guest_agent.0, which qemu-guest-agent in the guest opens); "" gives
	// the guest no channel, as a runner before it had none: a migration's two sides must match.
	AgentSocket string
	// VNCSocket, when set, gives the guest a VGA card whose screen QEMU serves over VNC on this
	// unix socket (display.go); "" gives it no display, as a runner before displays did.
	VNCSocket string

	// Filesystems are virtio-fs shares (filesystems.go); with any, the guest's RAM is a shared
	// memfd.
	Filesystems []Filesystem

	// IncomingSocket, when set, makes the guest a live migration's target (incoming.go): QEMU
	// waits for it on this unix socket, and it stays paused (-S) once it arrived.
	IncomingSocket string
}

// AgentChardev is the guest agent channel's chardev id: query-chardev reports under it whether
// the guest has the port open (frontend-open), which is whether an agent listens there.
const AgentChardev = "qga0"

// Args returns the argv after the binary name. The guest starts paused (-S): the runner
// attaches to the console and QMP first, then resumes it, so no boot output is lost.
func Args(s Spec) ([]string, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	machine := "q35"
	if s.Machine != "" {
		machine = s.Machine
	}
	if s.Kernel == "" {
		// Without graphics SeaBIOS prints on the serial port, so its "No bootable device."
		// reaches the console the runner reads.
		machine += ",graphics=off"
	}
	accel := s.Acceleration
	if accel == "tcg" {
		// TCG's translation cache would grow to 1 GiB on this kind of host, beyond what the
		// pod's memory limit allows for: bound it (podspec adds it to an emulated VM's memory).
		accel += ",tb-size=" + strconv.FormatInt(TCGTranslationCacheMiB(s.MemoryMiB, s.MaxCPUs > s.CPUs), 10)
	}
	if s.sharedMemory() {
		machine += ",memory-backend=" + RAMBackend
	} else if s.IncomingSocket != "" {
		machine += ",memory-backend=" + incomingRAM
	}
	args := []string{
		"-name", "guest=" + optValue(s.Name),
		"-machine", machine,
		"-accel", accel,
	}
	if cpu := s.cpuOption(); cpu != "" {
		args = append(args, "-cpu", cpu) // validate refuses commas: -cpu has no escape for them
	}
	args = append(args, s.sizeArgs()...)
	args = append(args, s.ramBackendArgs()...)
	args = append(args, s.incomingRAMArgs()...)
	args = append(args,
		"-nodefaults",
		"-no-user-config",
		"-display", "none",
		// QEMU never needs to spawn programs or gain privileges here.
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		// A guest reboot ends QEMU: the pod restarts the VM, as a container restart would.
		"-no-reboot",
	)
	boot, rootDevice := s.bootArgs()
	args = append(args, boot...)
	args = append(args,
		// file.driver=file makes the path a plain file name: QEMU would otherwise read
		// "json:{...}" or "nbd:..." in a bare file= as a protocol.
		"-drive", "if=none,id=root,format="+s.DiskFormat+",file.driver="+driver(s.DiskBlock)+",file.filename="+optValue(s.DiskPath)+",cache="+s.DiskCache+",aio=threads,discard=unmap",
		"-device", rootDevice,
	)
	if s.SeedPath != "" {
		// After the root disk, so the root stays /dev/vda and the seed is /dev/vdb. Read-only:
		// the guest cannot change what the next start is given.
		args = append(args,
			"-drive", "if=none,id=cidata,format=raw,read-only=on,file.driver=file,file.filename="+optValue(s.SeedPath)+",cache="+s.DiskCache+",aio=threads",
			"-device", "virtio-blk-pci,drive=cidata",
		)
	}
	args = append(args, driveArgs(s.Disks)...)
	if s.TapFD > 0 {
		args = append(args,
			"-netdev", "tap,id=net0,fd="+strconv.Itoa(s.TapFD)+",vhost=off",
			"-device", "virtio-net-pci,netdev=net0,mac="+s.MAC.String(),
		)
	}
	args = append(args, s.memoryDeviceArgs()...)
	args = append(args, s.filesystemArgs()...)
	args = append(args, s.channelArgs()...)
	args = append(args, s.displayArgs()...)
	args = append(args, s.slotArgs()...)
	args = append(args, s.incomingArgs()...)
	return append(args, "-S"), nil
}

// cpuOption is -cpu's value: CPUModel, or "host" under KVM, whose point is native speed; ""
// (none) under TCG, which keeps QEMU's default model, faster to emulate than "max".
func (s Spec) cpuOption() string {
	if s.CPUModel == "" && s.Acceleration == "kvm" {
		return "host"
	}
	return s.CPUModel
}

// bootArgs boot the guest from its kernel, or from its root disk through firmware; rootDevice is
// the root disk's device, the boot device in the second case.
func (s Spec) bootArgs() (args []string, rootDevice string) {
	rootDevice = "virtio-blk-pci,drive=root"
	if s.Kernel == "" {
		// The root disk is the one boot device: strict, so neither firmware goes on to a
		// network boot (the NIC's option ROM) when the disk has no bootloader.
		return append(firmwareArgs(s), "-boot", "strict=on"), rootDevice + ",bootindex=0"
	}
	args = []string{"-kernel", s.Kernel}
	if s.Initrd != "" {
		args = append(args, "-initrd", s.Initrd)
	}
	// -append takes its value verbatim (it is not an option list), and argv elements are never
	// split, so nothing in the command line can become a QEMU argument.
	return append(args, "-append", s.Cmdline), rootDevice
}

// channelArgs are the runner's ways into QEMU and the guest, each a unix socket QEMU serves:
// the serial console, QMP, and the guest agent's virtio-serial port when it has one; and
// pvpanic, which lets a guest kernel report a panic as QMP's GUEST_PANICKED.
func (s Spec) channelArgs() []string {
	args := []string{
		"-chardev", "socket,id=serial0,path=" + optValue(s.SerialSocket) + ",server=on,wait=off",
		"-device", "isa-serial,chardev=serial0",
		"-chardev", "socket,id=qmp,path=" + optValue(s.QMPSocket) + ",server=on,wait=off",
		"-mon", "chardev=qmp,mode=control",
		"-device", "pvpanic",
	}
	if s.AgentSocket != "" {
		args = append(args,
			"-chardev", "socket,id="+AgentChardev+",path="+optValue(s.AgentSocket)+",server=on,wait=off",
			"-device", "virtio-serial-pci,id=vser0",
			"-device", "virtserialport,bus=vser0.0,chardev="+AgentChardev+",name=org.qemu.guest_agent.0",
		)
	}
	return args
}

// firmwareArgs loads the firmware of a guest that boots from its disk. -bios takes its path
// verbatim; OVMF's two flash images are -drive option lists, opened as plain files.
func firmwareArgs(s Spec) []string {
	if s.Firmware == FirmwareBIOS {
		return []string{"-bios", s.FirmwareCode}
	}
	return []string{
		"-drive", "if=pflash,unit=0,format=raw,read-only=on,file.driver=file,file.filename=" + optValue(s.FirmwareCode),
		"-drive", "if=pflash,unit=1,format=raw,file.driver=file,file.filename=" + optValue(s.FirmwareVars),
	}
}

// TCGTranslationCacheMiB bounds TCG's translated-code cache (QEMU's tb-size) for a guest of
// guestMiB: QEMU fills the cache before it flushes it, so its bound is memory the pod must hold.
// An eighth of the guest, 32 to 128 MiB: the test guest (256 MiB) filled 60 MiB of a 128 MiB
// cache by its ready marker; bounded at 32 MiB it used 27 MiB less and booted a few percent
// slower (docs/benchmarks.md).
//
// A guest whose vCPUs are hotplugged gets the largest, 128 MiB: each new vCPU's TCG thread
// takes a region of the cache (2 MiB or more, at most eight per possible vCPU) for itself, and
// QEMU aborts (tcg_region_initial_alloc__locked) when every region is taken, as happens between
// two flushes of a cache that fills. More regions make that rare, not impossible: a QEMU limit
// of emulation (docs/runner.md); KVM has no such cache.
func TCGTranslationCacheMiB(guestMiB int64, hotplugCPUs bool) int64 {
	if hotplugCPUs {
		return 128
	}
	return min(max(guestMiB/8, 32), 128)
}

// optValue escapes a value placed inside a QEMU option list, where a comma separates options:
// QEMU reads ",," as a literal comma, so "a,b=c" cannot add an option "b=c".
func optValue(v string) string { return strings.ReplaceAll(v, ",", ",,") }

func (s Spec) validate() error {
	var errs []error
	switch s.Acceleration {
	case "kvm", "tcg":
	default:
		errs = append(errs, fmt.Errorf("acceleration %q: use kvm or tcg", s.Acceleration))
	}
	errs = append(errs, s.GuestSize.Validate(vmv1.SizeWords)...)
	switch s.DiskFormat {
	case "qcow2", "raw":
	default:
		errs = append(errs, fmt.Errorf("disk format %q: use qcow2 or raw", s.DiskFormat))
	}
	switch s.DiskCache {
	case CacheNone, CacheWriteback:
	default:
		errs = append(errs, fmt.Errorf("disk cache %q: use %s or %s (never unsafe: it drops the guest's flushes)", s.DiskCache, CacheNone, CacheWriteback))
	}
	if s.Machine != "" && !vmv1.MachineType.MatchString(s.Machine) {
		errs = append(errs, fmt.Errorf("machine %q: use q35 or a versioned q35 such as pc-q35-7.2", s.Machine))
	}
	// QEMU splits -cpu at its first comma into model and features, and ",," is no escape there.
	if strings.Contains(s.CPUModel, ",") {
		errs = append(errs, fmt.Errorf("cpu model %q: a CPU model name has no comma", s.CPUModel))
	}
	if s.Kernel == "" {
		switch s.Firmware {
		case FirmwareBIOS, FirmwareUEFI:
		default:
			errs = append(errs, fmt.Errorf("firmware %q: without a kernel the guest boots through firmware; use %s or %s", s.Firmware, FirmwareBIOS, FirmwareUEFI))
		}
		if s.Initrd != "" || s.Cmdline != "" {
			errs = append(errs, errors.New("an initrd or kernel command line needs a kernel; a disk's bootloader brings its own"))
		}
		if s.FirmwareCode == "" {
			errs = append(errs, errors.New("firmware code is required to boot through firmware"))
		}
		if (s.Firmware == FirmwareUEFI) != (s.FirmwareVars != "") {
			errs = append(errs, errors.New("a variable store goes with uefi firmware, and only with it"))
		}
	} else if s.Firmware != "" || s.FirmwareCode != "" || s.FirmwareVars != "" {
		errs = append(errs, fmt.Errorf("firmware %q: a guest booted from a kernel takes no firmware boot settings", s.Firmware))
	}
	if s.DiskBlock && s.DiskFormat != "raw" {
		errs = append(errs, errors.New("a root disk on a block device is raw"))
	}
	errs = append(errs, s.validateIncoming()...)
	errs = append(errs, s.validateDisplay()...)
	errs = append(errs, validateDrives(s.Disks)...)
	errs = append(errs, s.validateSlots()...)
	errs = append(errs, s.validateFilesystems()...)
	if s.TapFD > 0 && len(s.MAC) != 6 {
		errs = append(errs, errors.New("a tap device needs the guest's 6-byte MAC"))
	}
	for _, f := range []struct {
		name, value string
		required    bool
	}{
		{"name", s.Name, false}, {"cpu model", s.CPUModel, false}, {"kernel", s.Kernel, false}, {"initrd", s.Initrd, false},
		{"firmware code", s.FirmwareCode, false}, {"firmware vars", s.FirmwareVars, false},
		{"kernel command line", s.Cmdline, false}, {"disk path", s.DiskPath, true}, {"seed path", s.SeedPath, false},
		{"serial socket", s.SerialSocket, true}, {"QMP socket", s.QMPSocket, true}, {"agent socket", s.AgentSocket, false},
	} {
		if f.required && f.value == "" {
			errs = append(errs, fmt.Errorf("%s is required", f.name))
		}
		// QEMU reads its arguments as C strings, and a newline in a kernel command line or
		// a path is never intended.
		if strings.ContainsAny(f.value, "\x00\n\r") {
			errs = append(errs, fmt.Errorf("%s contains a NUL or newline", f.name))
		}
	}
	return errors.Join(errs...)
}
