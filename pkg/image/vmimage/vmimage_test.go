package vmimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel/pvhkerneltest"
)

// fakeELF is the kernel inside fakeFiles' bzImage.
var fakeELF = pvhkerneltest.ELF([]byte("kernel text"), true)

// fakeFiles writes a small bzImage (a PVH ELF kernel inside), an initrd, a disk and a copy
// program (its contents do not matter here; tools/imagebuild tests run the real one).
func fakeFiles(t *testing.T, disk []byte) Files {
	t.Helper()
	dir := t.TempDir()
	kernel := pvhkerneltest.BzImage(fakeELF, "gzip")
	f := Files{Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd"), Disk: filepath.Join(dir, "disk"), Copier: filepath.Join(dir, "vmcopy")}
	for p, b := range map[string][]byte{f.Kernel: kernel, f.Initrd: []byte("070701"), f.Disk: disk, f.Copier: []byte("\x7fELF")} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestImageLayout(t *testing.T) {
	f := fakeFiles(t, make([]byte, 4096))
	img, err := Image(f, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	if len(layers) != 3 {
		t.Fatalf("%d layers, want copy program, kernel+initrd and disk", len(layers))
	}
	cf, _ := img.ConfigFile()
	if len(cf.Config.Entrypoint) != 0 || len(cf.Config.Cmd) != 0 || cf.Architecture != "amd64" {
		t.Errorf("config %+v", cf.Config)
	}
	got := map[string]*tar.Header{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got["/"+strings.TrimSuffix(h.Name, "/")] = h
	}
	want := map[string]int64{"/boot": 0o755, "/disk": 0o755, KernelPath: 0o644, InitrdPath: 0o644, DiskPath: 0o644,
		"/virtpod": 0o755, "/virtpod/bin": 0o755, CopierPath: 0o755}
	if len(got) != len(want) {
		t.Errorf("entries %v, want exactly %v", keys(got), want)
	}
	for p, mode := range want {
		if h, ok := got[p]; !ok || h.Mode != mode {
			t.Errorf("%s: %+v, want mode %o", p, h, mode)
		}
	}
	if got[DiskPath].Size != 4096 {
		t.Errorf("disk size %d", got[DiskPath].Size)
	}
}

// TestKernelIsUnpacked: a bzImage is stored as the PVH vmlinux inside it unless KeepBzImage; a
// kernel that cannot boot by PVH is refused with the reason and the way to keep it.
func TestKernelIsUnpacked(t *testing.T) {
	f := fakeFiles(t, make([]byte, 512))
	bz, err := os.ReadFile(f.Kernel)
	if err != nil {
		t.Fatal(err)
	}
	elfFile := filepath.Join(t.TempDir(), "vmlinux")
	if err := os.WriteFile(elfFile, fakeELF, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		f    Files
		want []byte
	}{
		{"bzImage", Files{Kernel: f.Kernel, Copier: f.Copier}, fakeELF},
		{"kept bzImage", Files{Kernel: f.Kernel, Copier: f.Copier, KeepBzImage: true}, bz},
		{"vmlinux", Files{Kernel: elfFile, Copier: f.Copier}, fakeELF},
	} {
		img, err := Image(c.f, t.TempDir())
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := readFile(t, img, KernelPath); !bytes.Equal(got, c.want) {
			t.Errorf("%s: stored %d bytes, want %d", c.name, len(got), len(c.want))
		}
	}

	dir := t.TempDir()
	noPVH, noPVHELF := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "vmlinux")
	os.WriteFile(noPVH, pvhkerneltest.BzImage(pvhkerneltest.ELF([]byte("text"), false), "zstd"), 0o600)
	os.WriteFile(noPVHELF, pvhkerneltest.ELF([]byte("text"), false), 0o600)
	for _, c := range []struct {
		f    Files
		want string
	}{
		{Files{Kernel: noPVH, Copier: f.Copier}, "--kernel: " + noPVH + ": unpacking the bzImage to boot it by PVH: the kernel has no PVH entry"},
		{Files{Kernel: noPVH, Copier: f.Copier}, "or pass --keep-bzimage"},
		{Files{Kernel: noPVHELF, Copier: f.Copier}, "--kernel: " + noPVHELF + ": the kernel has no PVH entry"},
	} {
		if _, err := Layers(c.f, t.TempDir()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.f, err, c.want)
		}
	}
	if _, err := Layers(Files{Kernel: noPVH, Copier: f.Copier, KeepBzImage: true}, t.TempDir()); err != nil {
		t.Errorf("a bzImage without a PVH entry, kept: %v", err)
	}
}

// TestLayersAreShared: a kernel-only and a disk-only image reuse the combined image's layers.
func TestLayersAreShared(t *testing.T) {
	f := fakeFiles(t, qcow2Header())
	digests := func(f Files) []string {
		t.Helper()
		img, err := Image(f, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		layers, _ := img.Layers()
		var ds []string
		for _, l := range layers {
			d, _ := l.Digest()
			ds = append(ds, d.String())
		}
		return ds
	}
	both := digests(f)
	kernelOnly := digests(Files{Kernel: f.Kernel, Initrd: f.Initrd, Copier: f.Copier})
	diskOnly := digests(Files{Disk: f.Disk, Copier: f.Copier})
	if len(both) != 3 || !slices.Equal(kernelOnly, both[:2]) || !slices.Equal(diskOnly, []string{both[0], both[2]}) {
		t.Errorf("layers not shared: both %v, kernel %v, disk %v", both, kernelOnly, diskOnly)
	}
}

func TestRejectsBadInput(t *testing.T) {
	good := fakeFiles(t, make([]byte, 512))
	c := good.Copier
	for _, tc := range []struct {
		f    Files
		want string
	}{
		{Files{Copier: c}, "no --kernel and no root disk"},
		{Files{Initrd: good.Initrd, Disk: good.Disk, Copier: c}, "--initrd without --kernel"},
		{Files{Kernel: good.Initrd, Copier: c}, "is neither an x86 bzImage nor an ELF kernel"},
		{Files{Disk: fakeFiles(t, make([]byte, 1000)).Disk, Copier: c}, "not whole 512-byte sectors"},
		{Files{Disk: fakeFiles(t, nil).Disk, Copier: c}, "is empty"},
		{Files{Disk: t.TempDir(), Copier: c}, "is not a regular file"},
		{Files{Kernel: "/nonexistent", Copier: c}, "--kernel: open /nonexistent"},
		{Files{Disk: good.Disk, Rootfs: t.TempDir(), DiskSize: 1 << 20, Copier: c}, "pass only one"},
		{Files{Rootfs: t.TempDir(), Copier: c}, "need --disk-size"},
		{Files{Disk: good.Disk, DiskSize: 1 << 20, Copier: c}, "--disk-size only applies to --rootfs"},
		{Files{Kernel: good.Kernel}, "no copy program for /virtpod/bin/vmcopy"},
		{Files{Kernel: good.Kernel, Copier: "/nonexistent"}, "copy program: stat /nonexistent"},
		{Files{Disk: fakeFiles(t, []byte("KDMV")).Disk, Copier: c}, "is a VMDK image, not a raw or qcow2 disk image"},
		{Files{Kernel: good.Kernel, DiskName: "x.qcow2", Copier: c}, "--disk-name without a root disk"},
		{Files{Disk: good.Disk, DiskName: "disk.vmdk", Copier: c}, "--disk-name=disk.vmdk: want root.img or a file name ending .qcow2, .img or .raw"},
		{Files{Disk: good.Disk, DiskName: "sub/disk.img", Copier: c}, "--disk-name=sub/disk.img: want"},
		{Files{Disk: good.Disk, DiskName: ".img", Copier: c}, "--disk-name=.img: want"},
		{Files{Disk: good.Disk, DiskName: "debian.qcow2", Copier: c}, "--disk-name=debian.qcow2: the disk is raw; name it with .raw or .img, or convert it (qemu-img convert -O qcow2)"},
		{Files{Disk: fakeFiles(t, qcow2Header()).Disk, DiskName: "debian.raw", Copier: c}, "--disk-name=debian.raw: the disk is qcow2"},
	} {
		if _, err := Layers(tc.f, t.TempDir()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.f, err, tc.want)
		}
	}
}

// TestDiskName: the disk goes to /disk/<name>, the containerDisk layout; .img takes either format.
func TestDiskName(t *testing.T) {
	raw, qcow2 := fakeFiles(t, make([]byte, 4096)), fakeFiles(t, qcow2Header())
	for _, tc := range []struct {
		f    Files
		name string
	}{
		{Files{Disk: qcow2.Disk, DiskName: "debian-12.qcow2"}, "debian-12.qcow2"},
		{Files{Disk: qcow2.Disk, DiskName: "ubuntu.img"}, "ubuntu.img"},
		{Files{Disk: raw.Disk, DiskName: "disk.RAW"}, "disk.RAW"},
		{Files{Disk: raw.Disk, DiskName: "root.img"}, "root.img"},
		{Files{Disk: raw.Disk}, "root.img"},
	} {
		tc.f.Copier = raw.Copier
		img, err := Image(tc.f, t.TempDir())
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var disks []string
		tr := tar.NewReader(mutate.Extract(img))
		for h, err := tr.Next(); err == nil; h, err = tr.Next() {
			if dir, _ := filepath.Split("/" + h.Name); dir == DiskDir+"/" && h.Typeflag == tar.TypeReg {
				disks = append(disks, "/"+h.Name)
			}
		}
		if want := []string{DiskDir + "/" + tc.name}; !slices.Equal(disks, want) {
			t.Errorf("files in /disk: %v, want %v", disks, want)
		}
	}
}

// qcow2Header is the start of a qcow2 v3 image with no backing file and no encryption.
func qcow2Header() []byte {
	h := make([]byte, 512)
	copy(h, "QFI\xfb\x00\x00\x00\x03")
	h[20+3] = 16 // cluster bits
	return h
}

// TestRootfs: a directory and a tarball become an ext4 root disk of the asked size.
func TestRootfs(t *testing.T) {
	if _, err := exec.LookPath("mkfs.ext4"); err != nil && !fileExists("/usr/sbin/mkfs.ext4") && !fileExists("/sbin/mkfs.ext4") {
		if os.Getenv("CI") == "true" {
			t.Fatal("mkfs.ext4 not found: install e2fsprogs (CI=true: missing prerequisites fail)")
		}
		t.Skip("mkfs.ext4 not found: install e2fsprogs")
	}
	f := fakeFiles(t, nil)
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "hello"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "hello", Mode: 0o644, Size: 2})
	_, _ = tw.Write([]byte("hi"))
	_ = tw.Close()
	tarball := filepath.Join(t.TempDir(), "rootfs.tar")
	if err := os.WriteFile(tarball, tb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, files := range []Files{
		{Rootfs: root, DiskSize: 16 << 20, Copier: f.Copier},
		{RootfsTar: tarball, DiskSize: 16 << 20, Copier: f.Copier, Kernel: f.Kernel},
	} {
		work := t.TempDir()
		img, err := Image(files, work)
		if err != nil {
			t.Fatal(err)
		}
		disk := readFile(t, img, DiskPath)
		if len(disk) != 16<<20 || disk[0x438] != 0x53 || disk[0x439] != 0xef {
			t.Errorf("%+v: disk of %d bytes, magic % x; want 16 MiB of ext4", files, len(disk), disk[0x438:0x43a])
		}
		if left, _ := filepath.Glob(filepath.Join(work, "rootfs-tar-*")); len(left) != 0 {
			t.Errorf("the extracted tree is left in %v", left)
		}
	}
	if _, err := Image(Files{Rootfs: root, DiskSize: 1000, Copier: f.Copier}, t.TempDir()); err == nil || !strings.Contains(err.Error(), "--rootfs: disk size 1000") {
		t.Errorf("odd size: %v", err)
	}
}

// readFile returns one file's contents from the image's flattened file system.
func readFile(t *testing.T, img v1.Image, p string) []byte {
	t.Helper()
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s not in the image: %v", p, err)
		}
		if "/"+h.Name == p {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func keys(m map[string]*tar.Header) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
