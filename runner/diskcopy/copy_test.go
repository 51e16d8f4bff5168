package diskcopy

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// sourceDisk is a 32 MiB disk with 4 KiB of data at 0, 1 MiB at 5 MiB, 64 KiB of written zeros
// at 10 MiB (allocated, but a hole in a copy) and holes elsewhere.
func sourceDisk(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(claimDir(t, dir, "vm"), "disk.img")
	pattern(t, p, 0, 4096, 0x01)
	pattern(t, p, 5*mib, mib, 0x02)
	pattern(t, p, 10*mib, 64<<10, 0)
	if err := os.Truncate(p, 32*mib); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCopy(t *testing.T) {
	dir := t.TempDir()
	from := sourceDisk(t, dir)
	to := filepath.Join(claimDir(t, dir, "snap"), "disk.img")
	grown := filepath.Join(claimDir(t, dir, "grown"), "disk.img")
	start := time.Now()
	copies := []CopySpec{{From: from, To: to, Drive: "root"}, {From: from, To: grown, Size: 48 * mib}}
	if err := Copy(context.Background(), copies, CopyOptions{Log: zaptest.NewLogger(t)}); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(from)
	got, _ := os.ReadFile(to)
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s", to, from)
	}
	got, _ = os.ReadFile(grown)
	if len(got) != 48*mib || !bytes.Equal(got[:32*mib], want) || !bytes.Equal(got[32*mib:], make([]byte, 16*mib)) {
		t.Errorf("%s (%d bytes) is not %s extended to 48 MiB with zeros", grown, len(got), from)
	}
	for _, c := range copies {
		// 1 MiB and 4 KiB of data: the source's zeros and holes are holes.
		if a := allocated(t, c.To); a > mib+128<<10 {
			t.Errorf("%s: %d bytes allocated for 1028 KiB of data: not sparse", c.To, a)
		}
		if exists(c.To + PartialSuffix) {
			t.Errorf("%s is left behind", c.To+PartialSuffix)
		}
		m, err := ReadMarker(c.To)
		if err != nil {
			t.Fatal(err)
		}
		size := int64(32 * mib)
		if c.Size != 0 {
			size = c.Size
		}
		if m.Drive != c.Drive || m.Size != size || m.Base || m.From != from || m.CompletedAt.Before(start) {
			t.Errorf("%s's marker: %+v", c.To, m)
		}
	}

	// A restore reads a completed snapshot disk: one with its marker.
	restored := filepath.Join(claimDir(t, dir, "restored"), "disk.img")
	if err := Copy(context.Background(), []CopySpec{{From: to, To: restored}}, CopyOptions{RequireMarker: true}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(restored); !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s", restored, to)
	}
}

func TestCopyRefuses(t *testing.T) {
	dir := t.TempDir()
	from := sourceDisk(t, dir)
	existing := filepath.Join(claimDir(t, dir, "existing"), "disk.img")
	if err := os.WriteFile(existing, []byte("guest data"), 0o600); err != nil {
		t.Fatal(err)
	}
	partialDir := claimDir(t, dir, "partial")
	if err := os.WriteFile(filepath.Join(partialDir, "disk.img"+PartialSuffix), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	badMarker := filepath.Join(claimDir(t, dir, "badmarker"), "disk.img")
	if err := os.WriteFile(badMarker, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeMarker(badMarker, Marker{Size: 8192}); err != nil {
		t.Fatal(err)
	}
	fresh := func() string { return filepath.Join(claimDir(t, t.TempDir(), "new"), "disk.img") }
	ok := CopySpec{From: from, To: fresh()}
	for _, c := range []struct {
		name          string
		copies        []CopySpec
		requireMarker bool
		want          string
	}{
		{"to exists", []CopySpec{{From: from, To: existing}}, false, existing + " exists already: a copier pod is never restarted"},
		{"partial exists", []CopySpec{{From: from, To: filepath.Join(partialDir, "disk.img")}}, false, "disk.img.partial exists already"},
		{"from missing", []CopySpec{{From: "/nonexistent/disk.img", To: fresh()}}, false, "from /nonexistent/disk.img: stat"},
		{"from a directory", []CopySpec{{From: dir, To: fresh()}}, false, "is not a regular file"},
		{"no claim", []CopySpec{{From: from, To: "/nonexistent/claim/disk.img"}}, false, "is the claim mounted at /nonexistent/claim?"},
		{"smaller", []CopySpec{{From: from, To: fresh(), Size: mib}}, false, "size 1048576 is below " + from + "'s 33554432 bytes"},
		{"no marker", []CopySpec{{From: from, To: fresh()}}, true, from + " is not a completed snapshot disk"},
		{"marker of another size", []CopySpec{{From: badMarker, To: fresh()}}, true, "its marker records 8192 bytes, the file has 4096"},
		// Every copy is checked before the first is made.
		{"second refused", []CopySpec{ok, {From: from, To: existing}}, false, existing + " exists already"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Copy(context.Background(), c.copies, CopyOptions{RequireMarker: c.requireMarker})
			if err == nil || !strings.Contains(err.Error(), c.want) || ExitCode(err) != ExitRefused {
				t.Errorf("Copy = %v (exit %d); want a refusal with %q", err, ExitCode(err), c.want)
			}
			for _, cp := range c.copies {
				if cp.To != existing && (exists(cp.To) || exists(cp.To+PartialSuffix) && filepath.Dir(cp.To) != partialDir) {
					t.Errorf("%s was written", cp.To)
				}
			}
		})
	}
	if b, _ := os.ReadFile(existing); string(b) != "guest data" {
		t.Errorf("%s was overwritten: %q", existing, b)
	}
}

// TestCopyCancel: a stopped copy leaves neither its file nor its partial file nor a marker.
func TestCopyCancel(t *testing.T) {
	dir := t.TempDir()
	from := sourceDisk(t, dir)
	to := filepath.Join(claimDir(t, dir, "snap"), "disk.img")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Copy(ctx, []CopySpec{{From: from, To: to}}, CopyOptions{})
	if !errors.Is(err, context.Canceled) || ExitCode(err) != ExitSignalled {
		t.Errorf("Copy = %v; want context.Canceled", err)
	}
	for _, p := range []string{to, to + PartialSuffix, MarkerPath(to)} {
		if exists(p) {
			t.Errorf("%s is there after a cancelled copy", p)
		}
	}
}

// TestCopyProgress: a line every 64 MiB (here with no minimum interval), and one at the end.
func TestCopyProgress(t *testing.T) {
	old := progressInterval
	progressInterval = 0
	t.Cleanup(func() { progressInterval = old })
	dir := t.TempDir()
	from := filepath.Join(claimDir(t, dir, "vm"), "disk.img")
	for off := int64(0); off < 160*mib; off += 32 * mib {
		pattern(t, from, off, mib, 0x5a)
	}
	if err := os.Truncate(from, 160*mib); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	to := filepath.Join(claimDir(t, dir, "snap"), "disk.img")
	if err := Copy(context.Background(), []CopySpec{{From: from, To: to}}, CopyOptions{Log: zap.New(core)}); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, e := range logs.All() {
		if e.Message == "copying" || e.Message == "copied" {
			m := e.ContextMap()
			lines = append(lines, e.Message+" "+itoa(m["doneBytes"])+" "+itoa(m["percent"]))
		}
	}
	// Data ends at 1, 33, 65, 97 and 129 MiB: reports where 64 MiB have passed since the last.
	want := []string{"copying 68157440 40", "copying 135266304 80", "copied 167772160 100"}
	if strings.Join(lines, "; ") != strings.Join(want, "; ") {
		t.Errorf("progress: %q, want %q", lines, want)
	}
}

func itoa(v any) string {
	n, _ := v.(int64)
	return strconv.FormatInt(n, 10)
}
