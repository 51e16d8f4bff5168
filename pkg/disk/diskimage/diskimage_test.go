package diskimage

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func qemuImg(t *testing.T) string {
	p, err := exec.LookPath("qemu-img")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("qemu-img not found (install qemu-utils: tools/dev/ci/install-deps.sh)")
		}
		t.Skip("qemu-img not found; install qemu-utils")
	}
	return p
}

func TestOverlayOnRawAndQcow2(t *testing.T) {
	img := qemuImg(t)
	dir := t.TempDir()
	raw := filepath.Join(dir, "base.raw")
	if err := os.WriteFile(raw, make([]byte, 4<<20), 0o444); err != nil {
		t.Fatal(err)
	}
	if f, s, err := Inspect(raw); err != nil || f != FormatRaw || s != 4<<20 {
		t.Fatalf("Inspect raw = %s %d %v", f, s, err)
	}
	ctx := context.Background()
	ov, err := CreateOverlay(ctx, img, raw, filepath.Join(dir, "root.qcow2"), 16)
	if err != nil {
		t.Fatal(err)
	}
	if f, s, err := Inspect(ov.Path); err != nil || f != FormatQCOW2 || s != 16<<20 || ov.BaseFormat != FormatRaw {
		t.Fatalf("overlay = %s %d %v (%+v)", f, s, err, ov)
	}
	// qemu-img itself must see the base as the backing file, in the right format.
	out, err := exec.Command(img, "info", ov.Path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "backing file: "+raw) || !strings.Contains(string(out), "backing file format: raw") {
		t.Fatalf("qemu-img info: %v\n%s", err, out)
	}
	// A second run keeps the guest's disk.
	again, err := CreateOverlay(ctx, img, raw, ov.Path, 16)
	if err != nil || !again.Reused {
		t.Fatalf("second CreateOverlay = %+v, %v; want the overlay reused", again, err)
	}
	// An overlay over a qcow2 base detects the base by its magic.
	ov2, err := CreateOverlay(ctx, img, ov.Path, filepath.Join(dir, "second.qcow2"), 0)
	if err != nil || ov2.BaseFormat != FormatQCOW2 || ov2.SizeBytes != 16<<20 {
		t.Fatalf("overlay on qcow2 = %+v, %v", ov2, err)
	}
}

func TestOverlayRefusesShrink(t *testing.T) {
	img := qemuImg(t)
	dir := t.TempDir()
	raw := filepath.Join(dir, "base.raw")
	if err := os.WriteFile(raw, make([]byte, 8<<20), 0o444); err != nil {
		t.Fatal(err)
	}
	_, err := CreateOverlay(context.Background(), img, raw, filepath.Join(dir, "root.qcow2"), 4)
	if err == nil || !strings.Contains(err.Error(), "--disk-size-mib") || !strings.Contains(err.Error(), "at least 8") {
		t.Fatalf("shrink: %v", err)
	}
}

func TestMissingBaseNamesFlag(t *testing.T) {
	_, err := CreateOverlay(context.Background(), "qemu-img", "/nonexistent/root.img", filepath.Join(t.TempDir(), "o"), 0)
	if err == nil || !strings.Contains(err.Error(), "--root-disk") {
		t.Fatalf("missing base: %v", err)
	}
}

func TestSupportsDirectIO(t *testing.T) {
	if SupportsDirectIO(filepath.Join(t.TempDir(), "missing")) {
		t.Error("a directory that does not exist reported O_DIRECT support")
	}
	// tmpfs gained O_DIRECT in Linux 6.6, so the answer for a real directory depends on the
	// kernel; log it for the record.
	t.Logf("O_DIRECT in a temp dir: %v, in /dev/shm: %v", SupportsDirectIO(t.TempDir()), SupportsDirectIO("/dev/shm"))
}
