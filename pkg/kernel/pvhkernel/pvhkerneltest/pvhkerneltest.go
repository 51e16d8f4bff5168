// Package pvhkerneltest makes small kernels for tests: a 64-bit x86 ELF file with or without the
// PVH entry note, and a bzImage that carries one compressed the way the kernel's build does.
package pvhkerneltest

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/ulikunitz/xz/lzma"
)

// ELF returns a 64-bit x86 ELF file of one loadable segment (text) and, with pvh, a note
// segment holding XEN_ELFNOTE_PHYS32_ENTRY; without, an unrelated Linux note.
func ELF(text []byte, pvh bool) []byte {
	const ehsize, phsize = 64, 56
	note := new(bytes.Buffer)
	name, typ := "Xen\x00", uint32(18)
	if !pvh {
		name, typ = "GNU\x00", 3
	}
	// A note before the one that matters, as vmlinux has several.
	for _, n := range []struct {
		name string
		typ  uint32
		desc []byte
	}{{"Linux\x00\x00\x00", 6, []byte("6.1\x00")}, {name, typ, []byte{0, 0, 0, 1}}} {
		binary.Write(note, binary.LittleEndian, []uint32{uint32(len(n.name)), uint32(len(n.desc)), n.typ})
		note.WriteString(n.name)
		note.Write(n.desc)
	}
	noteOff := uint64(ehsize + 2*phsize)
	textOff := noteOff + uint64(note.Len())
	b := new(bytes.Buffer)
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	binary.Write(b, binary.LittleEndian, struct {
		Type, Machine                                      uint16
		Version                                            uint32
		Entry, Phoff, Shoff                                uint64
		Flags                                              uint32
		Ehsize, Phentsize, Phnum, Shentsize, Shnum, Shstrx uint16
	}{2, 62, 1, 0x1000000, ehsize, 0, 0, ehsize, phsize, 2, 64, 0, 0})
	type prog struct {
		Type, Flags                                uint32
		Off, Vaddr, Paddr, Filesz, Memsz, Alignval uint64
	}
	binary.Write(b, binary.LittleEndian, prog{1, 5, textOff, 0x1000000, 0x1000000, uint64(len(text)), uint64(len(text)), 0x1000})
	binary.Write(b, binary.LittleEndian, prog{4, 4, noteOff, 0, 0, uint64(note.Len()), uint64(note.Len()), 4})
	b.Write(note.Bytes())
	b.Write(text)
	return b.Bytes()
}

// Relocs stands for the relocation table the kernel's build appends to vmlinux.bin.
var Relocs = []byte("\x00\x00\x00\x00relocations")

// BzImage wraps kernel and Relocs, compressed with the named compressor ("gzip", "lz4",
// "zstd", "lzma"; anything else is written as given), in a bzImage of boot protocol 2.15, the
// uncompressed length appended after every compressor but gzip, as the kernel's build does.
func BzImage(kernel []byte, compression string) []byte {
	raw := append(append([]byte{}, kernel...), Relocs...)
	payload := new(bytes.Buffer)
	switch compression {
	case "gzip":
		w := gzip.NewWriter(payload)
		w.Write(raw)
		w.Close()
	case "lz4":
		w := lz4.NewWriter(payload)
		w.Apply(lz4.LegacyOption(true))
		w.Write(raw)
		w.Close()
	case "zstd":
		w, _ := zstd.NewWriter(payload)
		w.Write(raw)
		w.Close()
	case "lzma":
		w, _ := lzma.NewWriter(payload)
		w.Write(raw)
		w.Close()
	default:
		payload.WriteString(compression)
	}
	if compression != "gzip" {
		binary.Write(payload, binary.LittleEndian, uint32(len(raw)))
	}
	const setupSects, payloadOffset = 1, 0x30
	img := make([]byte, (setupSects+1)*512+payloadOffset)
	img[0x1f1] = setupSects
	copy(img[0x202:], "HdrS")
	binary.LittleEndian.PutUint16(img[0x206:], 0x020f)
	binary.LittleEndian.PutUint32(img[0x248:], payloadOffset)
	binary.LittleEndian.PutUint32(img[0x24c:], uint32(payload.Len()))
	img = append(img, payload.Bytes()...)
	return append(img, "decompressor tail"...)
}

// Open writes b to a file in a temporary directory of t's and opens it for reading, as a runner
// opens its VM's kernel; the file is closed when t ends.
func Open(t testing.TB, b []byte) *os.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vmlinuz")
	if err := os.WriteFile(p, b, 0o444); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
