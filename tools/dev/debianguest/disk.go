package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/diskfs/go-diskfs/backend"
	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/fat32"
	"github.com/diskfs/go-diskfs/partition/gpt"
)

const (
	sector  = 512
	mib     = 1 << 20
	diskMiB = 1536 // the Debian guest's; sparse: the file takes the space of what it holds
	espMiB  = 64   // the kernel and initramfs with room for one more of each
	biosMiB = 1    // GRUB's core image
)

// Partition numbers, as the guest sees them (vda1, vda2, vda3).
const (
	espPart  = 1
	biosPart = 2
	rootPart = 3
)

// layout is where each partition is, in sectors, 1 MiB aligned; the root takes the rest of the
// disk but the backup GPT.
type layout struct {
	espStart, biosStart, rootStart, rootEnd int64
	rootPartUUID                            string
	sizeMiB                                 int64
}

func newLayout(sizeMiB int64) layout {
	l := layout{espStart: mib / sector, rootPartUUID: newUUID(), sizeMiB: sizeMiB}
	l.biosStart = l.espStart + espMiB*mib/sector
	l.rootStart = l.biosStart + biosMiB*mib/sector
	l.rootEnd = (sizeMiB-1)*mib/sector - 1
	return l
}

func (l layout) diskBytes() int64 { return l.sizeMiB * mib }

func (l layout) rootBytes() int64 { return (l.rootEnd - l.rootStart + 1) * sector }

// cmdline is the guest kernel's: the root by its partition's UUID (the disk may be vda or sda),
// the serial console the runner reads.
func (l layout) cmdline() string {
	return "root=PARTUUID=" + l.rootPartUUID + " ro console=tty0 console=ttyS0,115200"
}

// writeDisk makes the image: the partition table and the EFI system partition with go-diskfs, the
// ext4 root with mkfs.ext4 at the root partition's offset, and GRUB for BIOS boot.
func writeDisk(img, root, kernel, initrd string, l layout) error {
	// A sparse file. go-diskfs's partition and FAT packages are used directly: its disk package
	// would bring in every file system it knows, with their compressors.
	b, err := file.CreateFromPath(img, l.diskBytes())
	if err != nil {
		return err
	}
	defer b.Close()
	table := &gpt.Table{
		LogicalSectorSize: sector, PhysicalSectorSize: sector, ProtectiveMBR: true,
		Partitions: []*gpt.Partition{
			{Index: espPart, Start: uint64(l.espStart), End: uint64(l.biosStart - 1), Type: gpt.EFISystemPartition, Name: "EFI System"},
			{Index: biosPart, Start: uint64(l.biosStart), End: uint64(l.rootStart - 1), Type: gpt.BIOSBoot, Name: "BIOS boot"},
			{Index: rootPart, Start: uint64(l.rootStart), End: uint64(l.rootEnd), Type: gpt.LinuxFilesystem, Name: "root", GUID: l.rootPartUUID},
		},
	}
	w, err := b.Writable()
	if err != nil {
		return err
	}
	if err := table.Write(w, l.diskBytes()); err != nil {
		return fmt.Errorf("partition table: %w", err)
	}
	if err := writeESP(b, root, kernel, initrd, l); err != nil {
		return fmt.Errorf("EFI system partition: %w", err)
	}
	if err := b.Close(); err != nil {
		return err
	}
	if err := writeRoot(img, root, l); err != nil {
		return err
	}
	return writeGRUB(img, root, l)
}

// writeESP puts systemd-boot (the removable-media path, so no boot entry is needed in the
// firmware's variables), the kernel, the initramfs and one loader entry on a FAT32 file system.
func writeESP(b backend.Storage, root, kernel, initrd string, l layout) error {
	fsys, err := fat32.Create(b, (l.biosStart-l.espStart)*sector, l.espStart*sector, sector, "EFI", false)
	if err != nil {
		return err
	}
	for _, dir := range []string{"/EFI", "/EFI/BOOT", "/loader", "/loader/entries"} {
		if err := fsys.Mkdir(dir); err != nil {
			return err
		}
	}
	put := func(dst string, src string, data []byte) error {
		if src != "" {
			b, err := os.ReadFile(src)
			if err != nil {
				return err
			}
			data = b
		}
		f, err := fsys.OpenFile(dst, os.O_CREATE|os.O_RDWR)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			return fmt.Errorf("%s: %w", dst, err)
		}
		return f.Close()
	}
	entry := "title Debian (virtpod guest)\nlinux /vmlinuz\ninitrd /initrd.img\noptions " + l.cmdline() + "\n"
	for _, f := range []struct {
		dst, src string
		data     string
	}{
		{dst: "/EFI/BOOT/BOOTX64.EFI", src: filepath.Join(root, "usr/lib/systemd/boot/efi/systemd-bootx64.efi")},
		{dst: "/vmlinuz", src: kernel},
		{dst: "/initrd.img", src: initrd},
		{dst: "/loader/loader.conf", data: "default debian.conf\ntimeout 0\n"},
		{dst: "/loader/entries/debian.conf", data: entry},
	} {
		if err := put(f.dst, f.src, []byte(f.data)); err != nil {
			return err
		}
	}
	return nil
}

// writeRoot makes the ext4 root file system from the tree, inside the image at the root
// partition's offset, and checks it.
func writeRoot(img, root string, l layout) error {
	offset := l.rootStart * sector
	blocks := l.rootBytes() / 4096
	if err := run("mkfs.ext4", "-q", "-F", "-L", "root", "-b", "4096", "-E", "offset="+strconv.FormatInt(offset, 10)+",nodiscard",
		"-d", root, img, strconv.FormatInt(blocks, 10)); err != nil {
		return err
	}
	return run("e2fsck", "-f", "-n", img+"?offset="+strconv.FormatInt(offset, 10))
}

// writeGRUB makes the image boot under a BIOS too, as grub-install would without touching a
// device: GRUB's core image (with its configuration built in) goes into the BIOS boot partition,
// and GRUB's boot sector into the protective MBR, told where the core image starts. Both come
// from the guest's own grub-pc-bin; grub-mkimage runs in the root tree.
func writeGRUB(img, root string, l layout) error {
	cfg := fmt.Sprintf("serial --unit=0 --speed=115200\nterminal_input serial\nterminal_output serial\n"+
		"set root=(hd0,gpt%d)\nlinux /vmlinuz %s\ninitrd /initrd.img\nboot\n", rootPart, l.cmdline())
	if err := os.WriteFile(filepath.Join(root, "tmp", "grub-early.cfg"), []byte(cfg), 0o644); err != nil {
		return err
	}
	defer os.Remove(filepath.Join(root, "tmp", "grub-early.cfg"))
	defer os.Remove(filepath.Join(root, "tmp", "core.img"))
	if err := run("chroot", root, "grub-mkimage", "-O", "i386-pc", "-o", "/tmp/core.img", "-c", "/tmp/grub-early.cfg",
		"-p", fmt.Sprintf("(hd0,gpt%d)/boot/grub", rootPart),
		"biosdisk", "part_gpt", "ext2", "linux", "serial", "terminal", "boot"); err != nil {
		return err
	}
	core, err := os.ReadFile(filepath.Join(root, "tmp", "core.img"))
	if err != nil {
		return err
	}
	bootImg, err := os.ReadFile(filepath.Join(root, "usr/lib/grub/i386-pc/boot.img"))
	if err != nil {
		return err
	}
	return installGRUB(img, bootImg, core, l.biosStart, int64(biosMiB*mib))
}

// GRUB's i386-pc boot sector and core image layout (grub-core/boot/i386/pc/boot.S, diskboot.S).
const (
	bootKernelSector = 0x5c  // boot.img: the 64-bit LBA of the core image's first sector
	bootCodeEnd      = 0x1b8 // boot.img's code ends where the MBR's disk signature begins
	blocklistStart   = 0x1f4 // diskboot.img: the last blocklist entry (start LBA, sectors, segment)
)

// installGRUB writes core at sector start (at most room bytes) and GRUB's boot sector into the
// MBR, keeping the protective MBR's partition entry.
func installGRUB(img string, bootImg, core []byte, start, room int64) error {
	// diskboot loads whole sectors.
	core = append(append([]byte(nil), core...), make([]byte, (sector-len(core)%sector)%sector)...)
	if len(bootImg) != sector || len(core) < sector || int64(len(core)) > room {
		return fmt.Errorf("GRUB: boot.img of %d bytes, core.img of %d bytes (room for %d)", len(bootImg), len(core), room)
	}
	// diskboot loads the rest of the core image from here.
	binary.LittleEndian.PutUint64(core[blocklistStart:], uint64(start+1))
	binary.LittleEndian.PutUint16(core[blocklistStart+8:], uint16(len(core)/sector-1))
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(core, start*sector); err != nil {
		return err
	}
	mbr := make([]byte, sector)
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, sector), mbr); err != nil {
		return err
	}
	copy(mbr[:bootCodeEnd], bootImg[:bootCodeEnd])
	binary.LittleEndian.PutUint64(mbr[bootKernelSector:], uint64(start))
	if _, err := f.WriteAt(mbr, 0); err != nil {
		return err
	}
	return f.Close()
}
