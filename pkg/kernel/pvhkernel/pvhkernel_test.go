package pvhkernel_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel"
	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel/pvhkerneltest"
)

var text = bytes.Repeat([]byte("kernel text "), 5000)

func TestUnpackEachCompressor(t *testing.T) {
	want := pvhkerneltest.ELF(text, true)
	for _, c := range []string{"gzip", "lz4", "zstd", "lzma"} {
		img := pvhkerneltest.BzImage(want, c)
		payload, err := pvhkernel.Payload(img)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if got := pvhkernel.Detect(payload); string(got) != c {
			t.Errorf("%s payload detected as %q", c, got)
		}
		got, err := pvhkernel.Unpack(img)
		if err != nil {
			t.Errorf("%s: %v", c, err)
			continue
		}
		// The relocations after the ELF file are cut off; the file is otherwise unchanged.
		if !bytes.Equal(got, want) {
			t.Errorf("%s: unpacked %d bytes, want the %d-byte ELF file", c, len(got), len(want))
		}
		if got := unpackTo(t, img); !bytes.Equal(got, want) {
			t.Errorf("%s: UnpackTo wrote %d bytes, want the %d-byte ELF file", c, len(got), len(want))
		}
	}
}

// unpackTo is what UnpackTo leaves in a file.
func unpackTo(t *testing.T, img []byte) []byte {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "vmlinux")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pvhkernel.UnpackTo(f, img); err != nil {
		t.Fatalf("UnpackTo: %v", err)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestUnpackBzip2: Go has no bzip2 writer, so the payload is testdata/kernel.bz2, made by
// `bzip2 -9` from pvhkerneltest.ELF([]byte("bzip2 kernel text"), true) and Relocs.
func TestUnpackBzip2(t *testing.T) {
	bz2, err := os.ReadFile("testdata/kernel.bz2")
	if err != nil {
		t.Fatal(err)
	}
	want := pvhkerneltest.ELF([]byte("bzip2 kernel text"), true)
	img := pvhkerneltest.BzImage(nil, string(bz2))
	payload, _ := pvhkernel.Payload(img)
	binary.LittleEndian.PutUint32(payload[len(payload)-4:], uint32(len(want)+len(pvhkerneltest.Relocs)))
	if c := pvhkernel.Detect(payload); c != pvhkernel.Bzip2 {
		t.Errorf("detected as %q", c)
	}
	if got, err := pvhkernel.Unpack(img); err != nil || !bytes.Equal(got, want) {
		t.Errorf("Unpack: %d bytes, %v; want the %d-byte ELF file", len(got), err, len(want))
	}
}

func TestUnpackRefuses(t *testing.T) {
	good := pvhkerneltest.BzImage(pvhkerneltest.ELF(text, true), "gzip")
	oldProtocol := bytes.Clone(good)
	binary.LittleEndian.PutUint16(oldProtocol[0x206:], 0x0206)
	outside := bytes.Clone(good)
	binary.LittleEndian.PutUint32(outside[0x24c:], 1<<30)
	hugeClaim := pvhkerneltest.BzImage(pvhkerneltest.ELF(text, true), "lz4")
	payload, _ := pvhkernel.Payload(hugeClaim)
	binary.LittleEndian.PutUint32(payload[len(payload)-4:], 1<<31)
	longClaim := pvhkerneltest.BzImage(pvhkerneltest.ELF(text, true), "zstd")
	payload, _ = pvhkernel.Payload(longClaim)
	binary.LittleEndian.PutUint32(payload[len(payload)-4:], uint32(len(text)*2))
	corrupt := pvhkerneltest.BzImage(pvhkerneltest.ELF(text, true), "lzma")
	payload, _ = pvhkernel.Payload(corrupt)
	for i := 20; i < len(payload)-4; i += 7 {
		payload[i] ^= 0x5a
	}
	notELF := pvhkerneltest.BzImage(text, "gzip")
	i386 := pvhkerneltest.ELF(text, true)
	i386[4] = 1 // ELFCLASS32
	for _, c := range []struct {
		name string
		img  []byte
		want string
	}{
		{"no PVH note", pvhkerneltest.BzImage(pvhkerneltest.ELF(text, false), "zstd"), "no PVH entry"},
		{"xz", pvhkerneltest.BzImage(text, "\xfd7zXZ\x00xz-stream"), "BCJ filter"},
		{"lzo", pvhkerneltest.BzImage(text, "\x89LZOlzo-stream"), "no Go LZO decoder"},
		{"unknown", pvhkerneltest.BzImage(text, "plain text"), "unknown compression"},
		{"not a bzImage", pvhkerneltest.ELF(text, true), "not an x86 bzImage"},
		{"empty", nil, "not an x86 bzImage"},
		{"old protocol", oldProtocol, "boot protocol 2.06"},
		{"payload outside", outside, "outside the"},
		{"huge claim", hugeClaim, "not a kernel"},
		{"claim beyond the stream", longClaim, "zstd payload"},
		{"corrupt stream", corrupt, "lzma payload"},
		{"payload not ELF", notELF, "not an ELF file"},
		{"32-bit ELF", pvhkerneltest.BzImage(i386, "gzip"), "not an ELF file"},
		{"header cut short", good[:0x240], "cut short"},
	} {
		_, err := pvhkernel.Unpack(c.img)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
		f, ferr := os.CreateTemp(t.TempDir(), "vmlinux")
		if ferr != nil {
			t.Fatal(ferr)
		}
		if err := pvhkernel.UnpackTo(f, c.img); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: UnpackTo: %v, want an error saying %q", c.name, err, c.want)
		}
		f.Close()
	}
}

func TestTrimKeepsSections(t *testing.T) {
	k := pvhkerneltest.ELF(text, true)
	got, err := pvhkernel.Trim(append(bytes.Clone(k), "relocs"...))
	if err != nil || !bytes.Equal(got, k) {
		t.Fatalf("Trim: %d bytes, %v; want the %d-byte file", len(got), err, len(k))
	}
	if _, err := pvhkernel.Trim(k[:len(k)-10]); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Errorf("a file cut short: %v", err)
	}
}

// TestUnpackTheTestGuestKernel unpacks the test guest's Debian kernel (an lz4 bzImage) into the
// PVH vmlinux that the tools/imagebuild tests and the cluster's VMs boot.
func TestUnpackTheTestGuestKernel(t *testing.T) {
	dir := os.Getenv("VIRTPOD_GUEST")
	if dir == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("VIRTPOD_GUEST is not set: make test builds the guest fixture and sets it")
		}
		t.Skip("VIRTPOD_GUEST not set (make guest-fixture)")
	}
	img, err := os.ReadFile(filepath.Join(dir, "boot", "vmlinuz"))
	if err != nil {
		t.Fatal(err)
	}
	k, err := pvhkernel.Unpack(img)
	if err != nil {
		t.Fatal(err)
	}
	if streamed := unpackTo(t, img); !bytes.Equal(streamed, k) {
		t.Errorf("UnpackTo wrote %d bytes, Unpack returned %d: want the same kernel", len(streamed), len(k))
	}
	f, err := elf.NewFile(bytes.NewReader(k))
	if err != nil {
		t.Fatal(err)
	}
	var loaded uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			loaded += p.Filesz
		}
	}
	// The compressed kernel is a fraction of what it loads: 13.5 MB of lz4 for about 50 MB.
	if loaded < 2*uint64(len(img)) || len(k) > 8*len(img) {
		t.Errorf("a %d-byte bzImage unpacked to %d bytes loading %d: want a kernel two to eight times its bzImage", len(img), len(k), loaded)
	}
}
