package runnerconfig

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Kinds of disk the runner attaches. The controller picks the kind from the disk's source and,
// for a PersistentVolumeClaim, its volumeMode.
const (
	// DiskBlock is a block device the kubelet mapped into the pod (a Block claim): the disk.
	DiskBlock = "block"
	// DiskFile is a folder on a volume (a Filesystem claim) holding the disk as the file
	// DiskFileName, made sparse at SizeMiB (the claim's capacity; 0: the volume's size) on
	// first use and never made again.
	DiskFile = "file"
	// DiskEmpty is a folder on an emptyDir: a blank sparse disk of SizeMiB, made at every start.
	DiskEmpty = "empty"
	// DiskFiles is a folder of files (a mounted ConfigMap or Secret): the runner writes them to
	// a small read-only ISO 9660 disk labelled with the disk's name.
	DiskFiles = "files"
	// DiskImage is a disk image file (raw or qcow2) in an image volume, attached read-only.
	DiskImage = "image"
)

// DiskFileName is the disk's file in a DiskFile folder. PopulatedMarker, beside it on a root
// disk's volume, records that the root-disk image was copied in completely; the copy is never
// made again. ReceivingMarker, beside a disk a live migration's target made for the source's
// mirror to fill, says the disk is partial until the guest arrived.
const (
	DiskFileName    = "disk.img"
	PopulatedMarker = ".virtpod-populated"
	ReceivingMarker = ".virtpod-receiving"
)

// Disk is one disk of the guest, rendered as --disk (data disks, in order) or --root-volume
// (the root disk kept on a claim: kind block or file, no name).
type Disk struct {
	Name     string // the disk's serial, a DNS label of at most 20 characters
	Kind     string // DiskBlock, DiskFile, DiskEmpty, DiskFiles or DiskImage
	Path     string // the device, folder or image file, by Kind
	SizeMiB  int64  // DiskFile, DiskEmpty: the disk's size
	ReadOnly bool
	// Migrate says how a live migration carries a claim (DiskBlock, DiskFile): MigrateCopy or
	// MigrateShared; "" refuses to migrate the guest when the claim is writable. An empty disk
	// is always copied, and a read-only disk never: on one, MigrateShared records that the
	// target's node can attach the volume too (the controller's verdict reads it).
	Migrate string
	// Hotplug puts the disk on hotplug slot Slot (0 to --hotplug-slots - 1), where it can be
	// detached from the running guest (docs/hotplug.md).
	Hotplug bool
	Slot    int
}

// How a live migration carries a writable claim.
const (
	// MigrateCopy: the target has a claim of its own, which the migration fills by mirroring
	// the whole disk (a node-local or ReadWriteOnce claim).
	MigrateCopy = "copy"
	// MigrateShared: the target attaches the same volume; nothing is copied (a ReadWriteMany
	// claim, or a Block claim a second node can attach).
	MigrateShared = "shared"
)

var (
	diskNameRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?$`)
	// diskPathRe keeps a disk's path a plain absolute path, so it stays one value of the
	// flag's comma-separated list.
	diskPathRe = regexp.MustCompile(`^/[-._/A-Za-z0-9]*$`)
)

// String renders the disk as the value of --disk: name=…,kind=…,path=…[,size-mib=…][,readonly].
func (d Disk) String() string {
	var b strings.Builder
	if d.Name != "" {
		b.WriteString("name=" + d.Name + ",")
	}
	b.WriteString("kind=" + d.Kind + ",path=" + d.Path)
	if d.SizeMiB != 0 {
		b.WriteString(",size-mib=" + strconv.FormatInt(d.SizeMiB, 10))
	}
	if d.ReadOnly {
		b.WriteString(",readonly")
	}
	if d.Migrate != "" {
		b.WriteString(",migrate=" + d.Migrate)
	}
	if d.Hotplug {
		b.WriteString(",slot=" + strconv.Itoa(d.Slot))
	}
	return b.String()
}

// ParseDisk reads what String writes.
func ParseDisk(s string) (Disk, error) {
	var d Disk
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		k, v, hasValue := strings.Cut(kv, "=")
		if seen[k] {
			return Disk{}, fmt.Errorf("disk %q: %s given twice", s, k)
		}
		seen[k] = true
		switch {
		case k == "name" && hasValue:
			d.Name = v
		case k == "kind" && hasValue:
			d.Kind = v
		case k == "path" && hasValue:
			d.Path = v
		case k == "size-mib" && hasValue:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return Disk{}, fmt.Errorf("disk %q: size-mib %q is not a number", s, v)
			}
			d.SizeMiB = n
		case k == "readonly" && !hasValue:
			d.ReadOnly = true
		case k == "migrate" && hasValue:
			d.Migrate = v
		case k == "slot" && hasValue:
			n, err := strconv.Atoi(v)
			if err != nil {
				return Disk{}, fmt.Errorf("disk %q: slot %q is not a number", s, v)
			}
			d.Hotplug, d.Slot = true, n
		default:
			return Disk{}, fmt.Errorf("disk %q: %q is not name=, kind=, path=, size-mib=, readonly, migrate= or slot=", s, kv)
		}
	}
	return d, nil
}

// validate checks one disk; flag names the flag it came from.
func (d Disk) validate(flag string, root bool) error {
	var errs []error
	if root {
		if d.Name != "" {
			errs = append(errs, fmt.Errorf("%s: the root disk takes no name", flag))
		}
		if d.Kind != DiskBlock && d.Kind != DiskFile {
			errs = append(errs, fmt.Errorf("%s: kind %q: a root disk on a claim is kind %s or %s", flag, d.Kind, DiskBlock, DiskFile))
		}
		if d.ReadOnly {
			errs = append(errs, fmt.Errorf("%s: a root disk is never read-only", flag))
		}
	} else {
		if !diskNameRe.MatchString(d.Name) || d.Name == "root" || d.Name == "cidata" {
			errs = append(errs, fmt.Errorf("%s: name %q: want a DNS label of at most 20 characters, not root or cidata", flag, d.Name))
		}
		switch d.Kind {
		case DiskBlock, DiskFile, DiskEmpty, DiskFiles, DiskImage:
		default:
			errs = append(errs, fmt.Errorf("%s: kind %q: use %s, %s, %s, %s or %s", flag, d.Kind, DiskBlock, DiskFile, DiskEmpty, DiskFiles, DiskImage))
		}
		if (d.Kind == DiskFiles || d.Kind == DiskImage) && !d.ReadOnly {
			errs = append(errs, fmt.Errorf("%s: a %s disk is always readonly", flag, d.Kind))
		}
		if d.Kind == DiskEmpty && d.ReadOnly {
			errs = append(errs, fmt.Errorf("%s: an empty disk the guest cannot write is of no use; drop readonly", flag))
		}
	}
	switch {
	case d.Migrate == "":
	case d.Migrate != MigrateCopy && d.Migrate != MigrateShared:
		errs = append(errs, fmt.Errorf("%s: migrate %q: use %s (the target's own claim is filled by mirroring) or %s (both sides attach the same volume)", flag, d.Migrate, MigrateCopy, MigrateShared))
	case d.Kind != DiskBlock && d.Kind != DiskFile:
		errs = append(errs, fmt.Errorf("%s: migrate is only for a claim (kind %s or %s): an empty disk is always copied, the others never", flag, DiskBlock, DiskFile))
	case d.ReadOnly && d.Migrate == MigrateCopy:
		errs = append(errs, fmt.Errorf("%s: migrate=%s on a read-only claim: nothing is written to it, so nothing is copied; use migrate=%s (the target attaches the same volume)", flag, MigrateCopy, MigrateShared))
	}
	if !diskPathRe.MatchString(d.Path) {
		errs = append(errs, fmt.Errorf("%s: path %q: want an absolute path of letters, digits, '-', '_', '.' and '/'", flag, d.Path))
	}
	switch {
	case d.Kind == DiskEmpty:
		if d.SizeMiB < 1 {
			errs = append(errs, fmt.Errorf("%s: size-mib must be at least 1 for an empty disk, got %d", flag, d.SizeMiB))
		}
	case d.Kind == DiskFile && !root:
		// 0: the claim's capacity was not known; the runner takes the volume's size.
		if d.SizeMiB < 0 {
			errs = append(errs, fmt.Errorf("%s: size-mib must not be negative, got %d (0 takes the volume's size)", flag, d.SizeMiB))
		}
	case d.SizeMiB != 0:
		errs = append(errs, fmt.Errorf("%s: size-mib is only for file and empty disks (a root disk's size is --disk-size-mib)", flag))
	}
	return errors.Join(errs...)
}

// validateDisks checks --disk and --root-volume, and what goes with them.
func (c *Config) validateDisks() []error {
	var errs []error
	names, slots := map[string]bool{}, map[int]bool{}
	if c.HotplugSlots < 0 || c.HotplugSlots > MaxHotplugSlots {
		errs = append(errs, fmt.Errorf("--hotplug-slots %d: want 0 to %d", c.HotplugSlots, MaxHotplugSlots))
	}
	if c.HotplugSlots > 0 && c.Provider != ProviderQEMU {
		errs = append(errs, fmt.Errorf("--hotplug-slots: only provider %s attaches and detaches disks of a running guest, not %q; drop the flag", ProviderQEMU, c.Provider))
	}
	for _, d := range c.Disks {
		if err := d.validate("--disk", false); err != nil {
			errs = append(errs, err)
		}
		if names[d.Name] {
			errs = append(errs, fmt.Errorf("--disk: name %q given twice; each disk needs its own serial", d.Name))
		}
		names[d.Name] = true
		if !d.Hotplug {
			continue
		}
		switch {
		case d.Slot < 0 || d.Slot >= c.HotplugSlots:
			errs = append(errs, fmt.Errorf("--disk %s: slot %d: the guest has %d hotplug slots (--hotplug-slots), 0 to %d", d.Name, d.Slot, c.HotplugSlots, c.HotplugSlots-1))
		case slots[d.Slot]:
			errs = append(errs, fmt.Errorf("--disk %s: slot %d is another disk's", d.Name, d.Slot))
		case d.Kind == DiskImage:
			errs = append(errs, fmt.Errorf("--disk %s: an image disk is never on a hotplug slot", d.Name))
		}
		slots[d.Slot] = true
	}
	if v := c.RootVolume; v != nil {
		if err := v.validate("--root-volume", true); err != nil {
			errs = append(errs, err)
		}
		if v.Kind == DiskBlock && c.RootDisk != "" {
			errs = append(errs, errors.New("--root-disk with a block --root-volume: filling a Block claim from an image is not supported; fill the device beforehand, or use a Filesystem claim"))
		}
	}
	return errs
}

// diskArgs renders the disk flags, data disks in their order (it is the guest's order too).
func (c Config) diskArgs() []string {
	var args []string
	if c.RootVolume != nil {
		args = append(args, "--root-volume="+c.RootVolume.String())
	}
	for _, d := range c.Disks {
		args = append(args, "--disk="+d.String())
	}
	if c.HotplugSlots > 0 { // none is the flag's default: the argv of pods made before hotplug
		args = append(args, "--hotplug-slots="+strconv.Itoa(c.HotplugSlots))
	}
	return args
}

// diskList collects repeated --disk flags.
type diskList struct{ disks *[]Disk }

func (l diskList) String() string {
	if l.disks == nil {
		return ""
	}
	s := make([]string, len(*l.disks))
	for i, d := range *l.disks {
		s[i] = d.String()
	}
	return strings.Join(s, " ")
}

func (l diskList) Set(v string) error {
	d, err := ParseDisk(v)
	if err != nil {
		return err
	}
	*l.disks = append(*l.disks, d)
	return nil
}

// rootVolume is --root-volume.
type rootVolume struct{ d **Disk }

func (r rootVolume) String() string {
	if r.d == nil || *r.d == nil {
		return ""
	}
	return (*r.d).String()
}

func (r rootVolume) Set(v string) error {
	d, err := ParseDisk(v)
	if err != nil {
		return err
	}
	*r.d = &d
	return nil
}

// MaxHotplugSlots bounds --hotplug-slots: each slot is a PCIe root port of the guest.
const MaxHotplugSlots = 16

func (c *Config) bindDisks(fs *flag.FlagSet) {
	fs.IntVar(&c.HotplugSlots, "hotplug-slots", 0, "how many hotplug slots (PCIe root ports) the guest has for disks attached and detached while it runs (provider qemu); 0: none")
	fs.Var(diskList{&c.Disks}, "disk", "a data disk, name=NAME,kind=block|file|empty|files|image,path=PATH[,size-mib=N][,readonly] (repeatable; the guest sees them in this order, serial NAME)")
	fs.Var(rootVolume{&c.RootVolume}, "root-volume", "the root disk kept on a claim: kind=block,path=DEVICE or kind=file,path=FOLDER (the disk is FOLDER/"+DiskFileName+"); with --root-disk, that image fills it once")
}
