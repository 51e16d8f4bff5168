package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLayout: the partitions are in order, 1 MiB aligned, do not overlap, and leave the disk's
// last MiB (the backup GPT) alone.
func TestLayout(t *testing.T) {
	l := newLayout(diskMiB)
	const mibSectors = mib / sector
	if l.espStart != mibSectors || l.biosStart <= l.espStart || l.rootStart <= l.biosStart || l.rootEnd <= l.rootStart {
		t.Fatalf("layout %+v", l)
	}
	for _, s := range []int64{l.espStart, l.biosStart, l.rootStart} {
		if s%mibSectors != 0 {
			t.Errorf("partition start %d is not 1 MiB aligned", s)
		}
	}
	if (l.rootEnd+1)*sector > l.diskBytes()-33*sector {
		t.Errorf("the root partition ends at %d, over the backup GPT", (l.rootEnd+1)*sector)
	}
	if !strings.Contains(l.cmdline(), "root=PARTUUID="+l.rootPartUUID) || !strings.Contains(l.cmdline(), "console=ttyS0") {
		t.Errorf("cmdline %q", l.cmdline())
	}
	if newLayout(diskMiB).rootPartUUID == l.rootPartUUID {
		t.Error("two images share a root PARTUUID")
	}
}

// TestInstallGRUB: the boot sector's code goes into the MBR with the core image's sector, the
// protective MBR's partition entry and signature stay, and the core image, padded to whole
// sectors, is told where its remaining sectors are.
func TestInstallGRUB(t *testing.T) {
	img := filepath.Join(t.TempDir(), "disk.img")
	mbr := make([]byte, sector)
	for i := bootCodeEnd; i < sector; i++ {
		mbr[i] = byte(i) // the disk signature and the protective partition entry
	}
	if err := os.WriteFile(img, mbr, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 4*mib); err != nil {
		t.Fatal(err)
	}
	bootImg := bytes.Repeat([]byte{0xb0}, sector)
	core := bytes.Repeat([]byte{0xc0}, 2*sector+100) // not whole sectors, as grub-mkimage writes it
	const start = 2048
	if err := installGRUB(img, bootImg, core, start, mib); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(img)
	if !bytes.Equal(b[bootCodeEnd:sector], mbr[bootCodeEnd:]) {
		t.Error("the protective MBR's partition table or signature changed")
	}
	if got := binary.LittleEndian.Uint64(b[bootKernelSector:]); got != start {
		t.Errorf("boot sector points at sector %d, want %d", got, start)
	}
	if b[0] != 0xb0 || b[bootKernelSector-1] != 0xb0 {
		t.Error("the boot sector's code is not in the MBR")
	}
	c := b[start*sector:]
	if got := binary.LittleEndian.Uint64(c[blocklistStart:]); got != start+1 {
		t.Errorf("core blocklist starts at %d, want %d", got, start+1)
	}
	if got := binary.LittleEndian.Uint16(c[blocklistStart+8:]); got != 2 {
		t.Errorf("core blocklist has %d sectors, want 2 (3 sectors in all, padded)", got)
	}
	if c[3*sector-1] != 0 || c[2*sector+99] != 0xc0 || c[2*sector+100] != 0 {
		t.Error("the core image's last sector is not its data padded with zeros")
	}
	if err := installGRUB(img, bootImg, bytes.Repeat([]byte{1}, 3*sector), start, 2*sector); err == nil {
		t.Error("a core image larger than the BIOS boot partition was written")
	}
}
