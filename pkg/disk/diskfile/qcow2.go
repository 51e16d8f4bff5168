package diskfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// qcow2 header layout (QEMU's docs/interop/qcow2.txt).
const (
	qcow2V2HeaderLen = 72
	qcow2V3HeaderLen = 104
	// incompatible_features bit 2: the guest's data lives in another file, named by the
	// data-file header extension.
	qcow2IncompatDataFile = 1 << 2
	qcow2ExtEnd           = 0
	qcow2ExtDataFile      = 0x44415441 // "DATA": the external data file's name
	qcow2ExtCrypto        = 0x0537be77 // the LUKS header of an encrypted image
	maxBackingName        = 1023       // QEMU refuses longer backing file names
)

// CheckImage refuses a disk image QEMU would open anything else for, or could not open without a
// key: a qcow2 with a backing file, with an external data file, or encrypted. A file in any other
// format passes (it is attached as raw). Every disk the runner lets QEMU probe for qcow2 goes
// through it: the image is the VM owner's, and such a header would make QEMU open a host path.
func CheckImage(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil || string(magic) != "QFI\xfb" {
		return nil
	}
	return checkQCOW2(file, f)
}

// checkQCOW2 reads the qcow2 header: version 2 or 3, no backing file (the base must stand alone:
// the runner's overlay is the only layer above it), no external data file and no encryption.
func checkQCOW2(file string, f io.ReaderAt) error {
	head := make([]byte, qcow2V3HeaderLen)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", file, err)
	}
	rebuild := "rebuild it with qemu-img convert -O qcow2"
	if n < qcow2V2HeaderLen {
		return fmt.Errorf("%s has a qcow2 signature but a truncated header: %s", file, rebuild)
	}
	be := binary.BigEndian
	version := be.Uint32(head[4:])
	switch version {
	case 2, 3:
	case 1:
		return fmt.Errorf("%s is a qcow (version 1) image, not qcow2: %s", file, convert)
	default:
		return fmt.Errorf("%s is a qcow2 image of unknown version %d: %s", file, version, convert)
	}
	// Either field set is refused: QEMU reads a name whenever the offset is set.
	if off, size := be.Uint64(head[8:]), be.Uint32(head[16:]); off != 0 || size != 0 {
		backing := "?"
		if size <= maxBackingName {
			b := make([]byte, size)
			if _, err := f.ReadAt(b, int64(off)); err == nil {
				backing = string(b)
			}
		}
		return fmt.Errorf("%s is a qcow2 overlay on a backing file (%s) the pod does not have: flatten it with qemu-img convert -O qcow2", file, backing)
	}
	if be.Uint32(head[32:]) != 0 {
		return fmt.Errorf("%s is an encrypted qcow2 image: the runner has no key for it; decrypt it with qemu-img convert", file)
	}
	extAt, incompat := uint64(qcow2V2HeaderLen), uint64(0)
	if version == 3 {
		if n < qcow2V3HeaderLen {
			return fmt.Errorf("%s has a truncated qcow2 version 3 header: %s", file, rebuild)
		}
		incompat, extAt = be.Uint64(head[72:]), max(uint64(be.Uint32(head[100:])), qcow2V3HeaderLen)
	}
	bits := be.Uint32(head[20:])
	if bits < 9 || bits > 21 {
		return fmt.Errorf("%s is a qcow2 image with an invalid cluster size (2^%d): %s", file, bits, rebuild)
	}
	dataFile, hasDataFile, luks := extensions(f, extAt, uint64(1)<<bits)
	// The extension without the bit is ignored by QEMU today; refused anyway, so no QEMU that
	// reads it otherwise opens a host path.
	if incompat&qcow2IncompatDataFile != 0 || hasDataFile {
		name := ""
		if hasDataFile {
			name = " (" + dataFile + ")"
		}
		return fmt.Errorf("%s is a qcow2 image whose data is in an external data file%s the pod does not have: %s", file, name, rebuild)
	}
	if luks {
		return fmt.Errorf("%s is an encrypted qcow2 image (LUKS): the runner has no key for it; decrypt it with qemu-img convert", file)
	}
	return nil
}

// extensions walks the header extensions from at to the end of the first cluster, where QEMU
// reads them, and reports the external data file's name and whether there is a LUKS header.
func extensions(f io.ReaderAt, at, end uint64) (dataFile string, hasDataFile, luks bool) {
	for at+8 <= end {
		ext := make([]byte, 8)
		if _, err := f.ReadAt(ext, int64(at)); err != nil {
			return // QEMU refuses a header cut short
		}
		typ, size := binary.BigEndian.Uint32(ext), uint64(binary.BigEndian.Uint32(ext[4:]))
		switch typ {
		case qcow2ExtEnd:
			return
		case qcow2ExtDataFile:
			hasDataFile, dataFile = true, "?"
			if size <= maxBackingName {
				b := make([]byte, size)
				if _, err := f.ReadAt(b, int64(at+8)); err == nil {
					dataFile = string(b)
				}
			}
		case qcow2ExtCrypto:
			luks = true
		}
		at += 8 + (size+7)&^7
	}
	return
}
