package qemu

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Drive is a data disk: a virtio-blk device whose serial is the disk's name, so the guest finds
// it at /dev/disk/by-id/virtio-<serial> (or /sys/block/vdX/serial) whatever its order.
type Drive struct {
	Serial   string // a DNS label of at most 20 characters: virtio-blk's serial holds 20 bytes
	Path     string
	Format   string // raw or qcow2; a disk the guest writes is always raw (see Validate)
	Block    bool   // Path is a block device (QEMU's host_device driver), not a file
	ReadOnly bool
	Cache    string // CacheNone or CacheWriteback: both honour the guest's flushes
	// Hotplug puts the disk on hotplug slot Slot (diskslots.go), where the runner can detach it.
	Hotplug bool
	Slot    int
}

var serialRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?$`)

// driver is QEMU's protocol driver for a path: a plain file or a host block device; never
// guessed from the path, so "nbd:…" or "json:{…}" is a file name.
func driver(block bool) string {
	if block {
		return "host_device"
	}
	return "file"
}

// driveArgs attaches the data disks after the root disk and the seed, in order, but for those on
// a hotplug slot (slotArgs). Each has its own drive id (DriveID), which cannot collide with root
// or cidata.
func driveArgs(drives []Drive) []string {
	var args []string
	for _, d := range drives {
		if !d.Hotplug {
			args = append(args, "-drive", d.driveOption(), "-device", d.device())
		}
	}
	return args
}

// driveOption is the disk's -drive.
func (d Drive) driveOption() string {
	opts := []string{"if=none", "id=" + DriveID(d.Serial), "format=" + d.Format, "file.driver=" + driver(d.Block),
		"file.filename=" + optValue(d.Path), "cache=" + d.Cache, "aio=threads"}
	if d.ReadOnly {
		opts = append(opts, "read-only=on")
	} else {
		// The guest's TRIM frees the space in a sparse file or a thin device.
		opts = append(opts, "discard=unmap")
	}
	return strings.Join(opts, ",")
}

// device is the disk's -device: on pcie.0, or with an id on its slot's root port.
func (d Drive) device() string {
	if d.Hotplug {
		return "virtio-blk-pci,id=" + DiskDeviceID(d.Serial) + ",bus=" + RootPortID(d.Slot) + ",drive=" + DriveID(d.Serial) + ",serial=" + d.Serial
	}
	return "virtio-blk-pci,drive=" + DriveID(d.Serial) + ",serial=" + d.Serial
}

func validateDrives(drives []Drive) []error {
	var errs []error
	seen := map[string]bool{}
	for _, d := range drives {
		if !serialRe.MatchString(d.Serial) {
			errs = append(errs, fmt.Errorf("disk serial %q: want a DNS label of at most 20 characters", d.Serial))
		}
		if seen[d.Serial] {
			errs = append(errs, fmt.Errorf("disk serial %q used twice", d.Serial))
		}
		seen[d.Serial] = true
		switch d.Format {
		case "raw":
		case "qcow2":
			// A guest that writes a disk can write any header into it; only a disk it cannot
			// write may be read as qcow2 (whose header can name a backing file on the host).
			if !d.ReadOnly {
				errs = append(errs, fmt.Errorf("disk %s: a writable data disk is raw, never qcow2", d.Serial))
			}
		default:
			errs = append(errs, fmt.Errorf("disk %s: format %q: use raw or qcow2", d.Serial, d.Format))
		}
		if d.Block && d.Format != "raw" {
			errs = append(errs, fmt.Errorf("disk %s: a block device is raw", d.Serial))
		}
		if d.Cache != CacheNone && d.Cache != CacheWriteback {
			errs = append(errs, fmt.Errorf("disk %s: cache %q: use %s or %s (never one that drops the guest's flushes)", d.Serial, d.Cache, CacheNone, CacheWriteback))
		}
		if d.Path == "" || strings.ContainsAny(d.Path, "\x00\n\r") {
			errs = append(errs, fmt.Errorf("disk %s: path %q: required, with no NUL or newline", d.Serial, d.Path))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return []error{errors.Join(errs...)}
}
