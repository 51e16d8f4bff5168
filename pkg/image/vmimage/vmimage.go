// Package vmimage is the VM image: its layout, the one definition pkg/podspec mounts and copies
// from, and its builder. A VM image is a container image that carries a guest's kernel, initrd
// and root disk at fixed paths, mounted read-only into runner pods as image volumes and never run.
//
// Layout:
//
//	/boot/vmlinuz        the kernel: an ELF vmlinux QEMU boots by its PVH entry (a given
//	                     bzImage is unpacked to it, pkg/kernel/pvhkernel), or a bzImage
//	/boot/initrd.img     the initramfs, optional
//	/disk/root.img       the root disk, raw or qcow2; or, as KubeVirt's containerDisk
//	                     layout has it, the one .qcow2, .img or .raw file in /disk (DiskName)
//	/virtpod/bin/vmcopy  a static copy program, for clusters without image volumes: init
//	                     containers run the image with it to copy /boot and /disk to emptyDirs
//
// The copy program, the kernel and initrd, and the disk each have a layer, so an image holding
// only the kernel, only the disk, or both shares layers with the others. The root disk is a
// given file, or made here from a root filesystem (a directory or a tarball) as raw ext4.
package vmimage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/virtpod/virtpod/pkg/disk/diskfile"
	"github.com/virtpod/virtpod/pkg/image/ociimage"
	"github.com/virtpod/virtpod/pkg/image/rootdisk"
	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel"
)

// Paths inside a VM image. The copy program copies BootDir and DiskDir whole.
const (
	BootDir    = "/boot"
	KernelPath = BootDir + "/vmlinuz"
	InitrdPath = BootDir + "/initrd.img"
	DiskDir    = "/disk"
	DiskPath   = DiskDir + "/root.img"
	CopierPath = "/virtpod/bin/vmcopy"
)

// Files are what goes into a VM image; empty means absent.
type Files struct {
	Kernel, Initrd string
	// The root disk: a disk image file, or one made from a root filesystem (a directory, or a
	// tarball such as `docker export` writes) as raw ext4 of DiskSize bytes.
	Disk, Rootfs, RootfsTar string
	DiskSize                int64
	// DiskName is the disk's file name in DiskDir: root.img (the default), or a containerDisk
	// name ending .qcow2, .img or .raw (see pkg/disk/diskfile, which the runner reads it by).
	DiskName string
	// Copier is the static copy program (cmd/vmcopy); every VM image has it.
	Copier string
	// KeepBzImage stores a bzImage Kernel as given. By default the image holds the PVH vmlinux
	// inside it, which spares each VM the copy of the bzImage QEMU otherwise keeps in memory.
	KeepBzImage bool
}

// Image builds the VM image. It has no entrypoint: the runtime only mounts it (or runs its copy
// program). Large files are written under work (a made root disk, the compressed disk layer),
// which the caller removes once the image is written.
func Image(f Files, work string) (v1.Image, error) {
	layers, err := Layers(f, work)
	if err != nil {
		return nil, err
	}
	return ociimage.Image(v1.Config{}, layers...)
}

// Layers checks the files, makes the root disk if asked to, and returns the image's layers.
func Layers(f Files, work string) ([]*ociimage.Layer, error) {
	disks := 0
	for _, d := range []string{f.Disk, f.Rootfs, f.RootfsTar} {
		if d != "" {
			disks++
		}
	}
	switch {
	case f.Kernel == "" && disks == 0:
		return nil, errors.New("no --kernel and no root disk (--disk, --rootfs or --rootfs-tar): a VM image needs at least one of them")
	case disks > 1:
		return nil, errors.New("--disk, --rootfs and --rootfs-tar each give the root disk: pass only one")
	case f.Initrd != "" && f.Kernel == "":
		return nil, errors.New("--initrd without --kernel: the initrd is only used with a kernel from the same image; pass --kernel too")
	case (f.Rootfs != "" || f.RootfsTar != "") && f.DiskSize == 0:
		return nil, errors.New("--rootfs and --rootfs-tar need --disk-size, the size of the disk to make (e.g. --disk-size=2Gi)")
	case f.Rootfs == "" && f.RootfsTar == "" && f.DiskSize != 0:
		return nil, errors.New("--disk-size only applies to --rootfs and --rootfs-tar: a --disk keeps its own size")
	case f.DiskName != "" && disks == 0:
		return nil, errors.New("--disk-name without a root disk: pass --disk, --rootfs or --rootfs-tar")
	case f.DiskName != "" && !validDiskName(f.DiskName):
		return nil, fmt.Errorf("--disk-name=%s: want %s or a file name ending .qcow2, .img or .raw (KubeVirt's containerDisk layout), with no '/' and not starting with '.'", f.DiskName, diskfile.RootName)
	case f.Copier == "":
		return nil, errors.New("no copy program for " + CopierPath + ": every VM image carries one (imagebuild builds cmd/vmcopy)")
	}
	copier := ociimage.NewLayer("vmcopy")
	if err := copier.HostFile(CopierPath, f.Copier, 0o755); err != nil {
		return nil, fmt.Errorf("copy program: %w", err)
	}
	layers := []*ociimage.Layer{copier}
	if f.Kernel != "" {
		kernel, err := kernelFile(f, work)
		if err != nil {
			return nil, err
		}
		boot := ociimage.NewLayer("kernel")
		if err := boot.HostFile(KernelPath, kernel, 0o644); err != nil {
			return nil, fmt.Errorf("--kernel: %w", err)
		}
		if f.Initrd != "" {
			if err := checkNonEmpty("--initrd", f.Initrd); err != nil {
				return nil, err
			}
			if err := boot.HostFile(InitrdPath, f.Initrd, 0o644); err != nil {
				return nil, fmt.Errorf("--initrd: %w", err)
			}
		}
		layers = append(layers, boot)
	}
	if disks == 0 {
		return layers, nil
	}
	disk, err := rootDisk(f, work)
	if err != nil {
		return nil, err
	}
	if err := checkDisk(disk, f.DiskName); err != nil {
		return nil, err
	}
	name := DiskPath
	if f.DiskName != "" {
		name = DiskDir + "/" + f.DiskName
	}
	l := ociimage.NewLayer("root disk")
	l.SpoolDir = work // gigabytes: compressed to a file, not memory
	if err := l.HostFile(name, disk, 0o644); err != nil {
		return nil, fmt.Errorf("--disk: %w", err)
	}
	return append(layers, l), nil
}

// rootDisk returns the disk image file: --disk as given, or one made under work.
func rootDisk(f Files, work string) (string, error) {
	if f.Disk != "" {
		return f.Disk, nil
	}
	img := filepath.Join(work, "root.img")
	if f.Rootfs != "" {
		if err := rootdisk.FromDir(f.Rootfs, img, f.DiskSize); err != nil {
			return "", fmt.Errorf("--rootfs: %w", err)
		}
		return img, nil
	}
	tmp, err := os.MkdirTemp(work, "rootfs-tar-")
	if err != nil {
		return "", err
	}
	// The extracted tree is only needed until the disk holds it.
	defer os.RemoveAll(tmp)
	if err := rootdisk.FromTar(f.RootfsTar, tmp, img, f.DiskSize); err != nil {
		return "", fmt.Errorf("--rootfs-tar: %w", err)
	}
	return img, nil
}

// kernelFile returns the kernel file to store: a bzImage's PVH vmlinux, written under work
// (unless KeepBzImage), or the given file, which must be a bzImage or an ELF kernel QEMU boots
// by its PVH entry (QEMU refuses an ELF kernel without one).
func kernelFile(f Files, work string) (string, error) {
	b, err := os.ReadFile(f.Kernel)
	if err != nil {
		return "", fmt.Errorf("--kernel: %w", err)
	}
	switch {
	case pvhkernel.IsBzImage(b) && f.KeepBzImage:
		return f.Kernel, nil
	case pvhkernel.IsBzImage(b):
		k, err := pvhkernel.Unpack(b)
		if err != nil {
			return "", fmt.Errorf("--kernel: %s: unpacking the bzImage to boot it by PVH: %w; or pass --keep-bzimage to store the bzImage (QEMU then holds a copy of it for each VM's life)", f.Kernel, err)
		}
		out := filepath.Join(work, "vmlinux")
		return out, os.WriteFile(out, k, 0o644)
	case bytes.HasPrefix(b, []byte("\x7fELF")):
		if _, err := pvhkernel.Trim(b); err != nil {
			return "", fmt.Errorf("--kernel: %s: %w", f.Kernel, err)
		}
		return f.Kernel, nil
	}
	return "", fmt.Errorf("--kernel: %s is neither an x86 bzImage nor an ELF kernel: pass the vmlinuz file, not a compressed vmlinux or an initrd", f.Kernel)
}

// checkDisk accepts what the runner boots (diskfile.Format: qcow2, or raw of whole 512-byte
// sectors), and a containerDisk name whose extension says the format only when it is right.
func checkDisk(file, name string) error {
	format, err := diskfile.Format(file)
	if err != nil {
		return fmt.Errorf("--disk: %w", err)
	}
	switch ext := strings.ToLower(filepath.Ext(name)); {
	case ext == ".qcow2" && format != diskfile.FormatQCOW2, ext == ".raw" && format != diskfile.FormatRaw:
		return fmt.Errorf("--disk-name=%s: the disk is %s; name it with .%s or .img, or convert it (qemu-img convert -O %s)", name, format, format, strings.TrimPrefix(ext, "."))
	}
	return nil
}

func validDiskName(name string) bool {
	return !strings.Contains(name, "/") && (name == diskfile.RootName || diskfile.IsCandidate(name))
}

func checkNonEmpty(flag, file string) error {
	head, err := readHead(flag, file, 1)
	if err != nil {
		return err
	}
	if len(head) == 0 {
		return fmt.Errorf("%s: %s is empty", flag, file)
	}
	return nil
}

func readHead(flag, file string, n int) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %s is not a regular file", flag, file)
	}
	b := make([]byte, n)
	got, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return b[:got], nil
}
