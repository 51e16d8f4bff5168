package main

import (
	"archive/tar"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/virtpod/virtpod/pkg/image/vmimage"
	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel/pvhkerneltest"
	"github.com/virtpod/virtpod/tools/imagebuild/elfdeps"
)

// fakeVmlinux is the kernel inside fakeGuest's bzImage, which the image stores unpacked.
var fakeVmlinux = pvhkerneltest.ELF([]byte("kernel text"), true)

// fakeGuest writes a small bzImage (fakeVmlinux inside), an initrd, and a 64 MiB raw disk that
// is mostly zeros, as root disks are.
func fakeGuest(t *testing.T) (kernel, initrd, disk string) {
	t.Helper()
	dir := t.TempDir()
	kernel, initrd, disk = filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd.img"), filepath.Join(dir, "root.img")
	k := pvhkerneltest.BzImage(fakeVmlinux, "lz4")
	d := make([]byte, 64<<20)
	copy(d[1<<20:], "superblock")
	copy(d[40<<20:], bytes.Repeat([]byte("data"), 4096))
	for p, b := range map[string][]byte{kernel: k, initrd: []byte("070701 initramfs"), disk: d} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return kernel, initrd, disk
}

func sameFile(t *testing.T, want, got string) {
	t.Helper()
	a, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(got)
	if err != nil {
		t.Errorf("%v", err)
		return
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s differs from %s", got, want)
	}
}

// TestVMImageCopyProgram: every VM image carries a static /virtpod/bin/vmcopy, and running it
// from the extracted image the way the fallback's init containers do copies the kernel and the
// disk to the paths the runner reads.
func TestVMImageCopyProgram(t *testing.T) {
	kernel, initrd, disk := fakeGuest(t)
	img, _ := build(t, "vm", "--kernel="+kernel, "--initrd="+initrd, "--disk="+disk)
	wantFile(t, files(t, img), vmimage.CopierPath, tar.TypeReg, 0o755, "")
	root := extract(t, img)
	copier := filepath.Join(root, vmimage.CopierPath)
	if res, err := (elfdeps.Resolver{}).Resolve(copier); err != nil || len(res.Interpreters) > 0 {
		t.Fatalf("%s is not a static binary: %+v %v", vmimage.CopierPath, res, err)
	}

	// The init containers: kernel copies /boot, disk copies /disk, into their emptyDirs.
	out := t.TempDir()
	for _, c := range [][2]string{{"/boot", "/virtpod/images/kernel/boot"}, {"/disk", "/virtpod/images/disk/disk"}} {
		cmd := exec.Command(copier, filepath.Join(root, c[0]), filepath.Join(out, c[1]))
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("vmcopy %s %s: %v\n%s", c[0], c[1], err, b)
		}
	}
	if b, err := os.ReadFile(filepath.Join(out, "virtpod/images/kernel", vmimage.KernelPath)); err != nil || !bytes.Equal(b, fakeVmlinux) {
		t.Errorf("copied kernel: %d bytes, %v; want the bzImage's %d-byte vmlinux", len(b), err, len(fakeVmlinux))
	}
	sameFile(t, initrd, filepath.Join(out, "virtpod/images/kernel", vmimage.InitrdPath))
	copied := filepath.Join(out, "virtpod/images/disk", vmimage.DiskPath)
	sameFile(t, disk, copied)
	if fi, err := os.Stat(copied); err == nil && fi.Mode().Perm() != 0o644 {
		t.Errorf("copied disk has mode %v, want the image's 0644", fi.Mode())
	}
	// The extracted disk is 64 MiB of mostly zeros; the copy must not be.
	if used := allocated(t, copied); used > 1<<20 {
		t.Errorf("the copied disk takes %d bytes, want its data only (zero blocks skipped)", used)
	}

	// And inside the image alone, as a container: nothing from the host is needed.
	t.Run("chrooted", func(t *testing.T) {
		cmd := inContainer(t, root, vmimage.CopierPath, "/disk", "/virtpod/images/disk/disk")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		sameFile(t, disk, filepath.Join(root, "virtpod/images/disk", vmimage.DiskPath))
	})

	t.Run("failure exits non-zero naming the path", func(t *testing.T) {
		b, err := exec.Command(copier, filepath.Join(root, "nonexistent"), filepath.Join(out, "x")).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(b), filepath.Join(root, "nonexistent")) {
			t.Errorf("err %v, output %q", err, b)
		}
		b, err = exec.Command(copier, "only-one-arg").CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(b), "usage: vmcopy SRC_DIR DST_DIR") {
			t.Errorf("usage: err %v, output %q", err, b)
		}
	})
}

// TestVMImageFromRootfs: --rootfs and --rootfs-tar with --disk-size give /disk/root.img as raw
// ext4 of that size holding the root filesystem.
func TestVMImageFromRootfs(t *testing.T) {
	debugfs := "/usr/sbin/debugfs"
	if p, err := exec.LookPath("debugfs"); err == nil {
		debugfs = p
	}
	needTool(t, "mkfs.ext4 and debugfs", "install e2fsprogs", fileExists(debugfs) && (haveCommands("mkfs.ext4") || fileExists("/usr/sbin/mkfs.ext4")))
	kernel, _, _ := fakeGuest(t)

	rootfs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "os-release"), []byte("ID=virtpod-test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(rootfs, "sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "sbin", "init"), []byte("#!/bin/sh\nexec sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(t.TempDir(), "rootfs.tar")
	if out, err := exec.Command("tar", "-C", rootfs, "-cf", tarball, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}

	for _, src := range []string{"--rootfs=" + rootfs, "--rootfs-tar=" + tarball} {
		t.Run(strings.SplitN(src, "=", 2)[0], func(t *testing.T) {
			img, _ := build(t, "vm", src, "--disk-size=48Mi", "--kernel="+kernel)
			fs := files(t, img)
			wantFile(t, fs, vmimage.KernelPath, tar.TypeReg, 0o644, "")
			wantFile(t, fs, vmimage.DiskPath, tar.TypeReg, 0o644, "")
			wantFile(t, fs, vmimage.CopierPath, tar.TypeReg, 0o755, "")
			if fs[vmimage.DiskPath].Size != 48<<20 {
				t.Errorf("disk is %d bytes, want 48 MiB", fs[vmimage.DiskPath].Size)
			}
			if layers, _ := img.Layers(); len(layers) != 3 {
				t.Errorf("%d layers, want 3 (copy program, kernel, disk)", len(layers))
			}
			disk := filepath.Join(extract(t, img), vmimage.DiskPath)
			for p, want := range map[string]string{"/etc/os-release": "ID=virtpod-test", "/sbin/init": "exec sh"} {
				out, err := exec.Command(debugfs, "-R", "cat "+p, disk).CombinedOutput()
				if err != nil || !strings.Contains(string(out), want) {
					t.Errorf("debugfs cat %s: %v\n%s", p, err, out)
				}
			}
			out, err := exec.Command(debugfs, "-R", "stat /sbin/init", disk).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "Mode:  0755") {
				t.Errorf("/sbin/init mode: %v\n%s", err, out)
			}
		})
	}
}

// allocated is the space a file takes on disk.
func allocated(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}
