package vmimage

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/virtpod/virtpod/pkg/podspec"
)

// The runner pod reads the paths this package writes.
func TestLayoutMatchesPodspec(t *testing.T) {
	if KernelPath != podspec.KernelPath || InitrdPath != podspec.InitrdPath || DiskPath != podspec.DiskPath {
		t.Fatalf("vmimage paths %s %s %s differ from podspec's %s %s %s",
			KernelPath, InitrdPath, DiskPath, podspec.KernelPath, podspec.InitrdPath, podspec.DiskPath)
	}
}

// fakeFiles writes a minimal bzImage (the "HdrS" magic), an initrd and a disk.
func fakeFiles(t *testing.T, disk []byte) Files {
	t.Helper()
	dir := t.TempDir()
	kernel := make([]byte, 0x400)
	copy(kernel[0x202:], "HdrS")
	f := Files{Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd"), Disk: filepath.Join(dir, "disk")}
	for p, b := range map[string][]byte{f.Kernel: kernel, f.Initrd: []byte("070701"), f.Disk: disk} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestImageLayout(t *testing.T) {
	f := fakeFiles(t, make([]byte, 4096))
	img, err := Image(f)
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	if len(layers) != 2 {
		t.Fatalf("%d layers, want kernel+initrd and disk", len(layers))
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
	want := map[string]int64{"/boot": 0o755, "/disk": 0o755, KernelPath: 0o644, InitrdPath: 0o644, DiskPath: 0o644}
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

// TestLayersAreShared: a kernel-only and a disk-only image reuse the combined image's layers.
func TestLayersAreShared(t *testing.T) {
	f := fakeFiles(t, []byte("QFI\xfb qcow2 header of any length"))
	both, err := Image(f)
	if err != nil {
		t.Fatalf("qcow2 disk: %v", err)
	}
	kernelOnly, err := Image(Files{Kernel: f.Kernel, Initrd: f.Initrd})
	if err != nil {
		t.Fatal(err)
	}
	diskOnly, err := Image(Files{Disk: f.Disk})
	if err != nil {
		t.Fatal(err)
	}
	bl, _ := both.Layers()
	kl, _ := kernelOnly.Layers()
	dl, _ := diskOnly.Layers()
	b0, _ := bl[0].Digest()
	b1, _ := bl[1].Digest()
	k0, _ := kl[0].Digest()
	d0, _ := dl[0].Digest()
	if b0 != k0 || b1 != d0 {
		t.Errorf("layers not shared: both %s %s, kernel %s, disk %s", b0, b1, k0, d0)
	}
}

func TestRejectsBadInput(t *testing.T) {
	good := fakeFiles(t, make([]byte, 512))
	for _, tc := range []struct {
		f    Files
		want string
	}{
		{Files{}, "no --kernel and no --disk"},
		{Files{Initrd: good.Initrd, Disk: good.Disk}, "--initrd without --kernel"},
		{Files{Kernel: good.Initrd}, "is neither an x86 bzImage nor an ELF kernel"},
		{Files{Disk: fakeFiles(t, make([]byte, 1000)).Disk}, "not whole 512-byte sectors"},
		{Files{Disk: fakeFiles(t, nil).Disk}, "is empty"},
		{Files{Disk: t.TempDir()}, "is not a regular file"},
		{Files{Kernel: "/nonexistent"}, "--kernel: open /nonexistent"},
	} {
		if _, err := Layers(tc.f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.f, err, tc.want)
		}
	}
}

func keys(m map[string]*tar.Header) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
