package cloudhypervisor

import (
	chapi "github.com/virtpod/virtpod/pkg/cloudhypervisor"
	"github.com/virtpod/virtpod/pkg/disk/diskimage"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// spec is m in the words of cloud-hypervisor's vm.create builder. cloud-hypervisor has no
// machine type, CPU model, guest agent channel, shares or incoming socket: the runner's flags
// refuse those for this provider before a Machine is made.
func spec(m hypervisor.Machine) chapi.Spec {
	s := chapi.Spec{
		GuestSize: m.GuestSize,
		Kernel:    m.Boot.Kernel, Initrd: m.Boot.Initrd, Cmdline: m.Boot.Cmdline, Firmware: m.Boot.FirmwareCode,
		DiskPath: m.Root.Path, DiskFormat: m.Root.Format, DirectIO: m.SeedDirect && m.Root.Direct,
		SerialSocket: m.Sockets.Serial, SeedPath: m.Seed,
	}
	for _, d := range m.Disks {
		s.Disks = append(s.Disks, chapi.DataDisk{Serial: d.Serial, Path: d.Path, Qcow2: d.Format == diskimage.FormatQCOW2,
			ReadOnly: d.ReadOnly, DirectIO: d.Direct})
	}
	if n := m.NIC; n != nil {
		s.TapName, s.MAC, s.MTU = n.Tap, n.MAC, n.MTU
	}
	return s
}
