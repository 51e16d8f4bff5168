// Package vmimage builds VM images: container images that carry a guest's kernel, initrd and
// root disk at fixed paths, mounted read-only into runner pods as image volumes and never run.
//
// Layout (pkg/podspec reads the same paths):
//
//	/boot/vmlinuz     the kernel (x86 bzImage, or an ELF kernel QEMU can boot as PVH)
//	/boot/initrd.img  the initramfs, optional
//	/disk/root.img    the root disk, raw or qcow2
//
// The kernel and initrd go in one layer and the disk in another, so an image holding only the
// kernel, only the disk, or both shares layers with the others.
package vmimage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/virtpod/virtpod/pkg/ociimage"
)

// Paths inside a VM image.
const (
	KernelPath = "/boot/vmlinuz"
	InitrdPath = "/boot/initrd.img"
	DiskPath   = "/disk/root.img"
)

// Files are the host files that go into a VM image; empty means absent.
type Files struct {
	Kernel, Initrd, Disk string
}

// Image builds the VM image. It has no entrypoint: the runtime only mounts it.
func Image(f Files) (v1.Image, error) {
	layers, err := Layers(f)
	if err != nil {
		return nil, err
	}
	return ociimage.Image(v1.Config{}, layers...)
}

// Layers checks the files and returns the image's layers.
func Layers(f Files) ([]*ociimage.Layer, error) {
	if f.Kernel == "" && f.Disk == "" {
		return nil, errors.New("no --kernel and no --disk: a VM image needs at least one of them")
	}
	if f.Initrd != "" && f.Kernel == "" {
		return nil, errors.New("--initrd without --kernel: the initrd is only used with a kernel from the same image; pass --kernel too")
	}
	var layers []*ociimage.Layer
	if f.Kernel != "" {
		if err := checkKernel(f.Kernel); err != nil {
			return nil, err
		}
		boot := ociimage.NewLayer("kernel")
		if err := boot.HostFile(KernelPath, f.Kernel, 0o644); err != nil {
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
	if f.Disk != "" {
		if err := checkDisk(f.Disk); err != nil {
			return nil, err
		}
		disk := ociimage.NewLayer("root disk")
		if err := disk.HostFile(DiskPath, f.Disk, 0o644); err != nil {
			return nil, fmt.Errorf("--disk: %w", err)
		}
		layers = append(layers, disk)
	}
	return layers, nil
}

// checkKernel accepts what QEMU's -kernel boots on x86: a bzImage ("HdrS" at 0x202) or ELF.
func checkKernel(file string) error {
	head, err := readHead("--kernel", file, 0x206)
	if err != nil {
		return err
	}
	if len(head) >= 0x206 && string(head[0x202:0x206]) == "HdrS" || bytes.HasPrefix(head, []byte("\x7fELF")) {
		return nil
	}
	return fmt.Errorf("--kernel: %s is neither an x86 bzImage nor an ELF kernel: pass the vmlinuz file, not a compressed vmlinux or an initrd", file)
}

// checkDisk accepts qcow2 (by its magic, as the runner tells them apart) or raw; a raw disk must
// be whole 512-byte sectors, or QEMU refuses it.
func checkDisk(file string) error {
	head, err := readHead("--disk", file, 4)
	if err != nil {
		return err
	}
	if bytes.Equal(head, []byte("QFI\xfb")) {
		return nil
	}
	fi, err := os.Stat(file)
	if err != nil {
		return fmt.Errorf("--disk: %w", err)
	}
	if fi.Size()%512 != 0 {
		return fmt.Errorf("--disk: %s is %d bytes, not whole 512-byte sectors: pad the raw image (truncate -s %%512) or convert it with qemu-img convert -O qcow2", file, fi.Size())
	}
	return nil
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
	if flag == "--disk" && got == 0 {
		return nil, fmt.Errorf("--disk: %s is empty", file)
	}
	return b[:got], nil
}
