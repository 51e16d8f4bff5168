package qemu

import (
	"fmt"
	"strconv"
)

// Disk hotplug slots (docs/hotplug.md). q35's root bus, pcie.0, takes no hotplug, so each slot is
// a PCIe root port of its own, and a disk on a slot is a virtio-blk device on that port, with an
// id the runner unplugs it by (device_del). The ports come after every other device: a guest
// that gains slots keeps its other devices' PCI addresses (and the interface names derived from
// them).

// MaxHotplugSlots bounds Spec.HotplugSlots: each slot takes one of pcie.0's 32 device numbers.
const MaxHotplugSlots = 16

// RootPortID is the id of slot n's PCIe root port, the bus of the disk on it.
func RootPortID(slot int) string { return "hp" + strconv.Itoa(slot) }

// DiskDeviceID is the id of the virtio-blk device of the hotpluggable disk serial.
func DiskDeviceID(serial string) string { return "vd-" + serial }

// DriveID is a data disk's drive: the -drive id of a disk the guest boots with, and the node
// name the runner gives a disk it attaches to the running guest (blockdev-add).
func DriveID(serial string) string { return "disk-" + serial }

// slotArgs are the hotplug slots' root ports, then the boot disks that sit on them. Each port
// has its own chassis and slot number (the guest names a hotplug slot by the latter), and no I/O
// window: a virtio disk behind a PCIe port is modern-only, and 16 ports would take the whole
// 64 KiB of I/O space the firmware has to give.
func (s Spec) slotArgs() []string {
	var args []string
	for i := range s.HotplugSlots {
		args = append(args, "-device", fmt.Sprintf("pcie-root-port,id=%s,bus=pcie.0,chassis=%d,slot=%d,io-reserve=0", RootPortID(i), i+1, i+1))
	}
	for _, d := range s.Disks {
		if d.Hotplug {
			args = append(args, "-drive", d.driveOption(), "-device", d.device())
		}
	}
	return args
}

func (s Spec) validateSlots() []error {
	var errs []error
	if s.HotplugSlots < 0 || s.HotplugSlots > MaxHotplugSlots {
		errs = append(errs, fmt.Errorf("hotplug slots %d: want 0 to %d", s.HotplugSlots, MaxHotplugSlots))
	}
	taken := map[int]string{}
	for _, d := range s.Disks {
		if !d.Hotplug {
			continue
		}
		if d.Slot < 0 || d.Slot >= s.HotplugSlots {
			errs = append(errs, fmt.Errorf("disk %s: slot %d: the guest has %d hotplug slots", d.Serial, d.Slot, s.HotplugSlots))
		} else if other, ok := taken[d.Slot]; ok {
			errs = append(errs, fmt.Errorf("disk %s: slot %d is disk %s's", d.Serial, d.Slot, other))
		}
		taken[d.Slot] = d.Serial
	}
	return errs
}
