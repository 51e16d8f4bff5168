package qemu

import (
	"os"
	"strconv"

	qemuargs "github.com/virtpod/virtpod/pkg/qemu"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// spec is m in pkg/qemu's words, and the files QEMU gets open (cmd.ExtraFiles, from fd 3): the
// tap, then the kernel. A file handed over is named by its fd in QEMU's process.
func spec(m hypervisor.Machine) (qemuargs.Spec, []*os.File) {
	s := qemuargs.Spec{
		Name: m.Name, Acceleration: m.Acceleration, Machine: m.Type, CPUModel: m.CPUModel,
		GuestSize: m.GuestSize,
		Kernel:    m.Boot.Kernel, Initrd: m.Boot.Initrd, Cmdline: m.Boot.Cmdline,
		Firmware: m.Boot.Firmware, FirmwareCode: m.Boot.FirmwareCode, FirmwareVars: m.Boot.FirmwareVars,
		DiskPath: m.Root.Path, DiskFormat: m.Root.Format, DiskCache: cache(m.Root.Direct), DiskBlock: m.Root.Block,
		SeedPath:     m.Seed,
		SerialSocket: m.Sockets.Serial, QMPSocket: m.Sockets.Control, AgentSocket: m.Sockets.Agent,
		IncomingSocket: m.Sockets.Incoming, VNCSocket: m.Sockets.Display, HotplugSlots: m.HotplugSlots,
	}
	for _, d := range m.Disks {
		s.Disks = append(s.Disks, qemuargs.Drive{Serial: d.Serial, Path: d.Path, Format: d.Format, Block: d.Block, ReadOnly: d.ReadOnly,
			Cache: cache(d.Direct), Hotplug: d.Hotplug, Slot: d.Slot})
	}
	for _, sh := range m.Shares {
		s.Filesystems = append(s.Filesystems, qemuargs.Filesystem{Tag: sh.Tag, Socket: sh.Socket})
	}
	var files []*os.File
	if m.NIC != nil && m.NIC.TapFile != nil {
		files = append(files, m.NIC.TapFile)
		s.TapFD, s.MAC = 2+len(files), m.NIC.MAC
	}
	if m.Boot.KernelFile != nil {
		files = append(files, m.Boot.KernelFile)
		s.Kernel = "/proc/self/fd/" + strconv.Itoa(2+len(files))
	}
	return s, files
}

// cache is QEMU's cache mode for a disk: none is O_DIRECT; writeback goes through the host's
// page cache (where O_DIRECT is not supported, such as tmpfs). Both pass the guest's flushes on.
func cache(direct bool) string {
	if direct {
		return qemuargs.CacheNone
	}
	return qemuargs.CacheWriteback
}
