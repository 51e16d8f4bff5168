package volumedisk_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/virtpod/virtpod/pkg/disk/volumedisk"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

const mib = 1 << 20

func allocated(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

// rawImage is a 24 MiB image: data in the first MiB, the 10th and the last; zeros elsewhere.
func rawImage(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	b := make([]byte, 24*mib)
	for _, at := range []int{0, 10 * mib, 24*mib - 4096} {
		copy(b[at:], bytes.Repeat([]byte("virtpod!"), 512))
	}
	p := filepath.Join(dir, "root.img")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, b
}

func read(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEnsureMakesOnceAndKeeps: a disk file is made sparse at its size once; a second Ensure,
// even asking another size, keeps it and its data.
func TestEnsureMakesOnceAndKeeps(t *testing.T) {
	p := filepath.Join(t.TempDir(), runnerconfig.DiskFileName)
	created, err := volumedisk.Ensure(p, 64*mib)
	if err != nil || !created {
		t.Fatalf("first Ensure: created %v, %v", created, err)
	}
	if fi, _ := os.Stat(p); fi.Size() != 64*mib || allocated(t, p) > mib {
		t.Fatalf("size %d, allocated %d: want 64 MiB, sparse", fi.Size(), allocated(t, p))
	}
	f, _ := os.OpenFile(p, os.O_WRONLY, 0)
	f.WriteAt([]byte("guest data"), 4096)
	f.Close()
	created, err = volumedisk.Ensure(p, 128*mib)
	if err != nil || created {
		t.Fatalf("second Ensure: created %v, %v; want the disk kept", created, err)
	}
	if b := read(t, p); len(b) != 64*mib || string(b[4096:4106]) != "guest data" {
		t.Fatal("the disk was changed")
	}
}

// TestFillCopiesOnceSparse: the disk is the image, grown to the size asked, with zero runs left
// as holes and a marker; a second Fill writes nothing, even after the guest changed the disk.
func TestFillCopiesOnceSparse(t *testing.T) {
	dir := t.TempDir()
	img, want := rawImage(t, t.TempDir())
	res, err := volumedisk.Fill(context.Background(), img, dir, volumedisk.FillOptions{SizeBytes: 32 * mib})
	if err != nil || !res.Filled {
		t.Fatalf("Fill: %+v, %v", res, err)
	}
	got := read(t, res.Path)
	if len(got) != 32*mib || !bytes.Equal(got[:len(want)], want) || !bytes.Equal(got[len(want):], make([]byte, 8*mib)) {
		t.Fatal("the disk is not the image grown to 32 MiB")
	}
	if a := allocated(t, res.Path); a > 4*mib {
		t.Errorf("%d bytes allocated for 3 chunks of data: not sparse", a)
	}
	m, err := volumedisk.ReadMarker(dir)
	if err != nil || m.Image != img || m.SizeBytes != 32*mib || m.ImageFormat != "raw" {
		t.Fatalf("marker %+v, %v", m, err)
	}
	os.WriteFile(res.Path, []byte("the guest's own data"), 0o600)
	res, err = volumedisk.Fill(context.Background(), img, dir, volumedisk.FillOptions{})
	if err != nil || res.Filled || string(read(t, res.Path)) != "the guest's own data" {
		t.Fatalf("second Fill: %+v, %v: it must never write a disk that is there", res, err)
	}
}

// TestFillResumes: a copy stopped after its first sync resumes at the synced offset, and what
// the dead copy half-wrote beyond it (garbage in a range that should be zeros) does not survive.
func TestFillResumes(t *testing.T) {
	dir := t.TempDir()
	img, want := rawImage(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	o := volumedisk.FillOptions{ChunkBytes: mib, SyncEvery: 8 * mib, Progress: func(done, total int64) { cancel() }}
	if _, err := volumedisk.Fill(ctx, img, dir, o); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted Fill: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, runnerconfig.DiskFileName)); err == nil {
		t.Fatal("an interrupted copy left a disk")
	}
	partial := filepath.Join(dir, runnerconfig.DiskFileName+".partial")
	f, err := os.OpenFile(partial, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(bytes.Repeat([]byte{0xee}, mib), 16*mib) // a zero range of the image
	f.Close()
	var calls int
	res, err := volumedisk.Fill(context.Background(), img, dir, volumedisk.FillOptions{ChunkBytes: mib, SyncEvery: 8 * mib,
		Progress: func(done, total int64) { calls++ }})
	if err != nil || !res.Filled || res.Resumed != 8*mib {
		t.Fatalf("resumed Fill: %+v, %v; want it to resume at 8 MiB", res, err)
	}
	if !bytes.Equal(read(t, res.Path), want) {
		t.Fatal("the resumed copy differs from the image")
	}
	if calls != 2 {
		t.Errorf("%d progress reports for the last 16 MiB, want 2", calls)
	}
}

// TestFillRefusesLostDisk: a volume that was filled but lost its disk is not filled again; one
// whose fill died between marker and rename is finished.
func TestFillRefusesLostDisk(t *testing.T) {
	dir := t.TempDir()
	img, want := rawImage(t, t.TempDir())
	res, err := volumedisk.Fill(context.Background(), img, dir, volumedisk.FillOptions{})
	if err != nil {
		t.Fatal(err)
	}
	partial := filepath.Join(dir, runnerconfig.DiskFileName+".partial")
	if err := os.Rename(res.Path, partial); err != nil {
		t.Fatal(err)
	}
	if res, err = volumedisk.Fill(context.Background(), img, dir, volumedisk.FillOptions{}); err != nil || res.Filled || !bytes.Equal(read(t, res.Path), want) {
		t.Fatalf("marker and partial disk: %+v, %v; want the rename finished", res, err)
	}
	os.Remove(res.Path)
	if _, err := volumedisk.Fill(context.Background(), img, dir, volumedisk.FillOptions{}); err == nil || !strings.Contains(err.Error(), "refusing to fill it again") {
		t.Fatalf("marker without a disk: %v", err)
	}
}

// TestFillConvertsQcow2: a qcow2 image becomes a raw disk with the same contents.
func TestFillConvertsQcow2(t *testing.T) {
	qemuImg, err := exec.LookPath("qemu-img")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("qemu-img not found (CI=true: missing prerequisites fail)")
		}
		t.Skip("qemu-img not found")
	}
	src := t.TempDir()
	raw, want := rawImage(t, src)
	qcow := filepath.Join(src, "root.qcow2")
	if out, err := exec.Command(qemuImg, "convert", "-O", "qcow2", raw, qcow).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	dir := t.TempDir()
	res, err := volumedisk.Fill(context.Background(), qcow, dir, volumedisk.FillOptions{QEMUImg: qemuImg})
	if err != nil || !res.Filled {
		t.Fatalf("Fill: %+v, %v", res, err)
	}
	if !bytes.Equal(read(t, res.Path), want) {
		t.Fatal("the converted disk differs from the image")
	}
	if m, _ := volumedisk.ReadMarker(dir); m == nil || m.ImageFormat != "qcow2" {
		t.Fatalf("marker %+v", m)
	}
}

// BenchmarkFill1GiB fills a claim from a 1 GiB raw image holding 256 MiB of data (one MiB in
// four), as a root disk's first boot does; make bench-disk runs it.
func BenchmarkFill1GiB(b *testing.B) {
	src := b.TempDir()
	img := filepath.Join(src, "root.img")
	f, err := os.Create(img)
	if err != nil {
		b.Fatal(err)
	}
	data := bytes.Repeat([]byte("virtpod!"), mib/8)
	for off := int64(0); off < 1<<30; off += 4 * mib {
		if _, err := f.WriteAt(data, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Truncate(1 << 30); err != nil {
		b.Fatal(err)
	}
	f.Sync()
	f.Close()
	b.ResetTimer()
	var written int64
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		b.StartTimer()
		res, err := volumedisk.Fill(context.Background(), img, dir, volumedisk.FillOptions{})
		if err != nil || !res.Filled {
			b.Fatalf("%+v %v", res, err)
		}
		written = res.Written
	}
	b.ReportMetric(float64(written)/mib, "MiB-written")
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/fill")
}
