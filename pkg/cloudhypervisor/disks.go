package cloudhypervisor

import (
	"fmt"
	"regexp"
	"unicode/utf8"
)

// DataDisk is a data disk: a virtio-blk device whose serial is the disk's name, attached after
// the root disk and the seed. A disk the guest can write is always raw (a qcow2 header in it
// could be the guest's own, naming a backing file on the host).
type DataDisk struct {
	Serial   string
	Path     string
	Qcow2    bool // only when ReadOnly
	ReadOnly bool
	DirectIO bool
}

var serialRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?$`)

func dataDisks(disks []DataDisk) ([]DiskConfig, []error) {
	var out []DiskConfig
	var errs []error
	seen := map[string]bool{}
	for _, d := range disks {
		if !serialRe.MatchString(d.Serial) || seen[d.Serial] {
			errs = append(errs, fmt.Errorf("disk serial %q: want a unique DNS label of at most 20 characters", d.Serial))
		}
		seen[d.Serial] = true
		if d.Qcow2 && !d.ReadOnly {
			errs = append(errs, fmt.Errorf("disk %s: a writable data disk is raw, never qcow2", d.Serial))
		}
		if d.Path == "" || !utf8.ValidString(d.Path) {
			errs = append(errs, fmt.Errorf("disk %s: path %q: required, in UTF-8", d.Serial, d.Path))
		}
		imageType := "Raw"
		if d.Qcow2 {
			imageType = "Qcow2"
		}
		out = append(out, DiskConfig{ID: "disk-" + d.Serial, Path: d.Path, Readonly: d.ReadOnly, Direct: d.DirectIO,
			ImageType: imageType, Serial: d.Serial})
	}
	return out, errs
}
