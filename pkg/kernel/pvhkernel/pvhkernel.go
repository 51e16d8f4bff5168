// Package pvhkernel turns an x86 bzImage into the uncompressed kernel inside it, which QEMU boots
// through the kernel's PVH entry. A bzImage costs a VM its size again in QEMU's memory for the
// VM's whole life (QEMU keeps it for fw_cfg and reboots) plus the guest RAM its decompressor
// touches; QEMU loads a PVH vmlinux from the mapped file instead (docs/images.md).
//
// The layout is the x86 boot protocol's (Documentation/arch/x86/boot.rst): the setup header at
// 0x1f1, the compressed payload at payload_offset (0x248) past the setup sectors, and the
// uncompressed length in the payload's last four bytes (mkpiggy reads it there). Inside is
// vmlinux.bin, an ELF file, followed by its relocations, which a PVH boot does not use.
package pvhkernel

import (
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/ulikunitz/xz/lzma"
)

// maxKernel bounds the uncompressed size a payload may claim: distribution kernels are 40 to
// 80 MB; a larger claim is a corrupt header, not a kernel.
const maxKernel = 512 << 20

// Compression names a payload's compressor, as the kernel's CONFIG_KERNEL_* options do.
type Compression string

const (
	Gzip  Compression = "gzip"
	Bzip2 Compression = "bzip2"
	LZMA  Compression = "lzma"
	XZ    Compression = "xz"
	LZO   Compression = "lzo"
	LZ4   Compression = "lz4"
	Zstd  Compression = "zstd"
)

// magics identify a payload by its first bytes (the kernel's lib/decompress.c table).
var magics = []struct {
	prefix string
	c      Compression
}{
	{"\x1f\x8b", Gzip}, {"BZh", Bzip2}, {"\x5d\x00\x00", LZMA}, {"\xfd7zXZ\x00", XZ},
	{"\x89LZO", LZO}, {"\x02\x21\x4c\x18", LZ4}, {"\x28\xb5\x2f\xfd", Zstd},
}

// IsBzImage says whether b starts like an x86 bzImage: "HdrS" at 0x202.
func IsBzImage(b []byte) bool {
	return len(b) >= 0x206 && string(b[0x202:0x206]) == "HdrS"
}

// Unpack returns the PVH-bootable ELF kernel inside bzImage b. It fails, saying why, for a file
// that is not a bzImage of boot protocol 2.08 or later, a compressor it cannot undo (xz kernels
// carry an x86 BCJ filter, LZO has no Go decoder), a payload that does not decompress to the
// length it claims, or a kernel without a PVH entry (CONFIG_PVH).
func Unpack(b []byte) ([]byte, error) {
	var out bytes.Buffer
	if err := unpack(&out, b); err != nil {
		return nil, err
	}
	return Trim(out.Bytes())
}

// UnpackTo writes the PVH kernel inside bzImage b to f, an empty file, and cuts f to the
// kernel's end; it refuses what Unpack refuses. Memory stays the decompressor's, not the
// kernel's size: for a process that must not hold a hostile 512 MB claim (the node agent).
func UnpackTo(f *os.File, b []byte) error {
	if err := unpack(f, b); err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	end, err := kernelEnd(f, st.Size())
	if err != nil {
		return err
	}
	return f.Truncate(end)
}

// unpack decompresses bzImage b's payload into w, exactly the length it claims.
func unpack(w io.Writer, b []byte) error {
	payload, err := Payload(b)
	if err != nil {
		return err
	}
	c := Detect(payload)
	if len(payload) < 8 {
		return fmt.Errorf("the %d-byte payload is too short to hold a kernel", len(payload))
	}
	size := binary.LittleEndian.Uint32(payload[len(payload)-4:])
	if size == 0 || size > maxKernel {
		return fmt.Errorf("the payload claims %d bytes uncompressed: not a kernel", size)
	}
	// gzip's own trailer ends in the length; every other compressor's output has it appended.
	stream := payload
	if c != Gzip {
		stream = payload[:len(payload)-4]
	}
	r, err := decompressor(c, stream)
	if err != nil {
		return err
	}
	// Read no more than the claim (lz4 would take the appended length for a block), and grow
	// with what really decompresses rather than trusting the claim with an allocation.
	n, err := io.Copy(w, io.LimitReader(r, int64(size)))
	if err != nil {
		return fmt.Errorf("%s payload: %w (want %d bytes)", c, err, size)
	}
	if n != int64(size) {
		return fmt.Errorf("%s payload: %d bytes decompressed, the payload claims %d", c, n, size)
	}
	return nil
}

// Payload returns the compressed payload of bzImage b.
func Payload(b []byte) ([]byte, error) {
	if !IsBzImage(b) {
		return nil, errors.New("not an x86 bzImage (no \"HdrS\" at 0x202)")
	}
	if len(b) < 0x250 {
		return nil, errors.New("the setup header is cut short")
	}
	if v := binary.LittleEndian.Uint16(b[0x206:]); v < 0x208 {
		return nil, fmt.Errorf("boot protocol %d.%02d: the payload's place is only recorded from 2.08 (Linux 2.6.26) on", v>>8, v&0xff)
	}
	sects := int(b[0x1f1])
	if sects == 0 {
		sects = 4 // the boot protocol's rule for old kernels
	}
	start := int64(sects+1)*512 + int64(binary.LittleEndian.Uint32(b[0x248:]))
	end := start + int64(binary.LittleEndian.Uint32(b[0x24c:]))
	if end > int64(len(b)) || start >= end {
		return nil, fmt.Errorf("the payload (bytes %d to %d) lies outside the %d-byte file", start, end, len(b))
	}
	return b[start:end], nil
}

// Detect names payload's compressor by its magic, "" when none matches.
func Detect(payload []byte) Compression {
	for _, m := range magics {
		if bytes.HasPrefix(payload, []byte(m.prefix)) {
			return m.c
		}
	}
	return ""
}

func decompressor(c Compression, stream []byte) (io.Reader, error) {
	src := bytes.NewReader(stream)
	switch c {
	case Gzip:
		return gzip.NewReader(src)
	case Bzip2:
		return bzip2.NewReader(src), nil
	case LZMA:
		return lzma.NewReader(src)
	case LZ4:
		return lz4.NewReader(src), nil
	case Zstd:
		d, err := zstd.NewReader(src, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	case XZ:
		return nil, errors.New("an xz payload: the kernel's xz carries an x86 BCJ filter, which no Go xz decoder undoes; build the kernel with another compressor (CONFIG_KERNEL_ZSTD) or pass its vmlinux")
	case LZO:
		return nil, errors.New("an LZO payload: there is no Go LZO decoder; build the kernel with another compressor (CONFIG_KERNEL_ZSTD) or pass its vmlinux")
	}
	return nil, fmt.Errorf("a payload of unknown compression (first bytes % x)", stream[:min(len(stream), 6)])
}

// Trim checks that k is a 64-bit x86 ELF kernel with a PVH entry and returns it without what
// follows its last segment and section table (a bzImage's payload appends relocations).
func Trim(k []byte) ([]byte, error) {
	end, err := kernelEnd(bytes.NewReader(k), int64(len(k)))
	if err != nil {
		return nil, err
	}
	return k[:end], nil
}

// kernelEnd checks that the size bytes of r are a 64-bit x86 ELF kernel with a PVH entry and
// returns where its last segment or section table ends.
func kernelEnd(r io.ReaderAt, size int64) (int64, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return 0, fmt.Errorf("the kernel is not an ELF file: %w", err)
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return 0, fmt.Errorf("the kernel is a %v %v ELF file, not a 64-bit x86 one", f.Class, f.Machine)
	}
	end := uint64(0)
	pvh := false
	for _, p := range f.Progs {
		end = max(end, p.Off+p.Filesz)
		if p.Type == elf.PT_NOTE {
			if p.Filesz > uint64(size) {
				return 0, fmt.Errorf("the kernel's notes (%d bytes) are larger than the file", p.Filesz)
			}
			notes := make([]byte, p.Filesz)
			if _, err := p.ReadAt(notes, 0); err != nil {
				return 0, fmt.Errorf("the kernel's notes: %w", err)
			}
			pvh = pvh || hasPVHEntry(notes)
		}
	}
	if !pvh {
		return 0, errors.New("the kernel has no PVH entry (the Xen note XEN_ELFNOTE_PHYS32_ENTRY, CONFIG_PVH=y): QEMU can only boot it as a bzImage")
	}
	// The ELF header at 0x28 (e_shoff), 0x3a (e_shentsize), 0x3c (e_shnum) of a 64-bit file.
	var hdr [0x40]byte
	if _, err := r.ReadAt(hdr[:], 0); err != nil {
		return 0, fmt.Errorf("the kernel's ELF header: %w", err)
	}
	shoff := binary.LittleEndian.Uint64(hdr[0x28:])
	shsize := uint64(binary.LittleEndian.Uint16(hdr[0x3a:])) * uint64(binary.LittleEndian.Uint16(hdr[0x3c:]))
	if shoff != 0 {
		end = max(end, shoff+shsize)
	}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOBITS {
			end = max(end, s.Offset+s.FileSize)
		}
	}
	if end > uint64(size) {
		return 0, fmt.Errorf("the kernel's ELF file is cut short: %d bytes of %d", size, end)
	}
	return int64(end), nil
}

// xenPHYS32Entry is XEN_ELFNOTE_PHYS32_ENTRY, the note QEMU looks for to boot an ELF by PVH.
const xenPHYS32Entry = 18

// hasPVHEntry walks ELF notes (namesz, descsz, type, then name and desc, each padded to 4 bytes).
func hasPVHEntry(notes []byte) bool {
	for len(notes) >= 12 {
		namesz := uint64(binary.LittleEndian.Uint32(notes))
		descsz := uint64(binary.LittleEndian.Uint32(notes[4:]))
		typ := binary.LittleEndian.Uint32(notes[8:])
		name := notes[12:]
		n := (namesz + 3) &^ 3
		d := (descsz + 3) &^ 3
		if uint64(len(name)) < n+d {
			return false
		}
		if typ == xenPHYS32Entry && namesz == 4 && string(name[:4]) == "Xen\x00" {
			return true
		}
		notes = name[n+d:]
	}
	return false
}
