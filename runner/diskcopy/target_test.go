package diskcopy

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/virtpod/virtpod/tests/prereq"
)

const mib = 1 << 20

func needQEMUNBD(t *testing.T) string {
	t.Helper()
	nbd, err := exec.LookPath(QEMUNBDName)
	_, ioErr := exec.LookPath("qemu-io")
	prereq.Need(t, err == nil && ioErr == nil, "needs qemu-nbd and qemu-io (qemu-utils): run tools/dev/ci/install-deps.sh")
	return nbd
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

// noDirectIn makes files under dir look like a file system without O_DIRECT (tmpfs before
// Linux 6.6), so qemu-nbd serves them with cache=writeback.
func noDirectIn(t *testing.T, dir string) {
	t.Cleanup(func() { directProbe = supportsDirect })
	directProbe = func(file string) bool { return !strings.HasPrefix(file, dir+"/") && supportsDirect(file) }
}

// cmdline is a process's arguments.
func cmdline(t *testing.T, pidFile string) string {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err = os.ReadFile("/proc/" + strings.TrimSpace(string(b)) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// claimDir makes a directory standing for a claim's mount.
func claimDir(t *testing.T, parent, name string) string {
	d := filepath.Join(parent, name)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// pattern writes n bytes of b at off.
func pattern(t *testing.T, p string, off int64, n int, b byte) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte{b}, n), off); err != nil {
		t.Fatal(err)
	}
}

// wantContent checks that file is size bytes, of b in each given range and zero elsewhere.
func wantContent(t *testing.T, file string, size int64, ranges map[int64][2]int) {
	t.Helper()
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	for off, r := range ranges {
		copy(want[off:], bytes.Repeat([]byte{byte(r[1])}, r[0]))
	}
	if int64(len(got)) != size {
		t.Fatalf("%s is %d bytes, want %d", file, len(got), size)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: byte %d is %#x, want %#x", file, i, got[i], want[i])
		}
	}
}

func waitFile(t *testing.T, p string, done <-chan error) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for !exists(p) {
		select {
		case err := <-done:
			t.Fatalf("Target returned before %s: %v", p, err)
		case <-deadline:
			t.Fatalf("no %s after 30s", p)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func qemuIO(t *testing.T, drive, sock string, cmds ...string) {
	t.Helper()
	args := []string{"-f", "raw"}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	args = append(args, "nbd+unix:///"+drive+"?socket="+sock)
	if out, err := exec.Command("qemu-io", args...).CombinedOutput(); err != nil || strings.Contains(string(out), "failed") {
		t.Fatalf("qemu-io %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestTarget serves two drives, one on a base, writes each through NBD as a backup job would,
// and checks the files, their holes and their markers.
func TestTarget(t *testing.T) {
	nbd := needQEMUNBD(t)
	control := t.TempDir()
	rootClaim := claimDir(t, t.TempDir(), "root")
	dataClaim := claimDir(t, t.TempDir(), "data")
	noDirectIn(t, dataClaim)
	const size = 16 * mib

	// The base: an earlier snapshot's disk, 4 KiB of data at 0 and at 8 MiB, holes elsewhere.
	prev := claimDir(t, t.TempDir(), "prev")
	base := filepath.Join(prev, "disk.img")
	pattern(t, base, 0, 4096, 0x11)
	pattern(t, base, 8*mib, 4096, 0x22)
	if err := os.Truncate(base, size); err != nil {
		t.Fatal(err)
	}
	if err := writeMarker(base, Marker{Drive: "disk-data", Size: size, CompletedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}

	// The sizes come from the node agent's SizesName, as for a running guest's snapshot (the
	// base's size is checked against it then).
	targets := []TargetSpec{
		{Drive: "root", File: filepath.Join(rootClaim, "disk.img")},
		{Drive: "disk-data", File: filepath.Join(dataClaim, "disk.img"), Base: base},
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- Target(context.Background(), control, targets, TargetOptions{QEMUNBD: nbd, Log: zaptest.NewLogger(t)})
	}()
	time.Sleep(200 * time.Millisecond)
	if exists(SocketPath(control, "root")) || exists(targets[0].File) {
		t.Fatal("root is served before the agent gave its size")
	}
	if err := os.WriteFile(filepath.Join(control, SizesName), []byte(`{"root": 16777216, "disk-data": 16777216}`), 0o400); err != nil {
		t.Fatal(err)
	}
	targets[0].Size, targets[1].Size = size, size
	waitFile(t, filepath.Join(control, ReadyName), done)
	ready, _ := os.ReadFile(filepath.Join(control, ReadyName))
	wantReady := "root " + SocketPath(control, "root") + "\ndisk-data " + SocketPath(control, "disk-data") + "\n"
	if string(ready) != wantReady {
		t.Errorf("%s = %q, want %q", ReadyName, ready, wantReady)
	}
	for _, tg := range targets {
		if fi, err := os.Lstat(SocketPath(control, tg.Drive)); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Fatalf("socket of %s: %v", tg.Drive, err)
		}
		if exists(MarkerPath(tg.File)) {
			t.Fatalf("%s has a marker while served", tg.Drive)
		}
	}
	if c := cmdline(t, pidPath(control, "root")); supportsDirect(targets[0].File) && !strings.Contains(c, "--cache=none") {
		t.Errorf("root's qemu-nbd: %s; want --cache=none", c)
	}
	if c := cmdline(t, pidPath(control, "disk-data")); !strings.Contains(c, "--cache=writeback") {
		t.Errorf("disk-data's qemu-nbd: %s; want --cache=writeback", c)
	}

	qemuIO(t, "root", SocketPath(control, "root"), "write -P 0xab 1M 64k")
	select {
	case err := <-done:
		t.Fatalf("Target returned after one of two clients: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	// The backup of the data drive: new data at 4 MiB, and the block at 8 MiB zeroed (a
	// backup job writes zeros where the guest discarded), which must become a hole again.
	qemuIO(t, "disk-data", SocketPath(control, "disk-data"), "write -P 0xcd 4M 64k", "write -z 8M 4k", "flush")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Target: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Target did not return after both clients disconnected")
	}

	wantContent(t, targets[0].File, size, map[int64][2]int{1 * mib: {64 << 10, 0xab}})
	wantContent(t, targets[1].File, size, map[int64][2]int{0: {4096, 0x11}, 4 * mib: {64 << 10, 0xcd}})
	for _, tg := range targets {
		// Sparse: the 16 MiB disks hold at most 68 KiB of data (and file systems allocate in
		// blocks of up to 64 KiB).
		if a := allocated(t, tg.File); a > 256<<10 {
			t.Errorf("%s: %d bytes allocated for 68 KiB of data: not sparse", tg.Drive, a)
		}
		m, err := ReadMarker(tg.File)
		if err != nil {
			t.Fatalf("%s: %v", tg.Drive, err)
		}
		if m.Drive != tg.Drive || m.Size != size || m.Base != (tg.Base != "") || m.From != "" || m.CompletedAt.Before(start) {
			t.Errorf("%s's marker: %+v", tg.Drive, m)
		}
		for _, p := range []string{SocketPath(control, tg.Drive), pidPath(control, tg.Drive)} {
			if exists(p) {
				t.Errorf("%s is left behind", p)
			}
		}
	}
	if !exists(filepath.Join(control, ReadyName)) {
		t.Errorf("%s was removed", ReadyName)
	}
}

// TestTargetCancel: ctx ending (SIGTERM in the pod) kills qemu-nbd and writes no marker.
func TestTargetCancel(t *testing.T) {
	nbd := needQEMUNBD(t)
	control := t.TempDir()
	file := filepath.Join(claimDir(t, t.TempDir(), "root"), "disk.img")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Target(ctx, control, []TargetSpec{{Drive: "root", File: file, Size: mib}}, TargetOptions{QEMUNBD: nbd, Log: zaptest.NewLogger(t)})
	}()
	waitFile(t, filepath.Join(control, ReadyName), done)
	b, err := os.ReadFile(pidPath(control, "root"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || ExitCode(err) != ExitSignalled {
			t.Errorf("Target = %v (exit %d); want context.Canceled, exit %d", err, ExitCode(err), ExitSignalled)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Target did not return after ctx ended")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("qemu-nbd (pid %d) still there: kill 0: %v", pid, err)
	}
	if exists(MarkerPath(file)) {
		t.Error("a marker after cancellation")
	}
	if exists(SocketPath(control, "root")) {
		t.Error("the socket is left behind")
	}
}

// TestTargetFailure: a qemu-nbd that fails makes Target fail with its stderr, no marker.
func TestTargetFailure(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "qemu-nbd")
	script := "#!/bin/sh\necho 'qemu-nbd: Failed to blk_new_open: boom' >&2\nexit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(claimDir(t, t.TempDir(), "root"), "disk.img")
	err := Target(context.Background(), t.TempDir(), []TargetSpec{{Drive: "root", File: file, Size: mib}}, TargetOptions{QEMUNBD: fake})
	if err == nil || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "drive root") || ExitCode(err) != ExitFailed {
		t.Errorf("Target = %v (exit %d); want drive root's stderr, exit %d", err, ExitCode(err), ExitFailed)
	}
	if exists(MarkerPath(file)) {
		t.Error("a marker after a failure")
	}

	// One that listens and then fails (its client's write failing, say) stops the others.
	nbd := needQEMUNBD(t)
	control := t.TempDir()
	dir := t.TempDir()
	targets := []TargetSpec{
		{Drive: "root", File: filepath.Join(claimDir(t, dir, "root"), "disk.img"), Size: mib},
		{Drive: "disk-a", File: filepath.Join(claimDir(t, dir, "a"), "disk.img"), Size: mib},
	}
	done := make(chan error, 1)
	go func() {
		done <- Target(context.Background(), control, targets, TargetOptions{QEMUNBD: nbd, Log: zaptest.NewLogger(t)})
	}()
	waitFile(t, filepath.Join(control, ReadyName), done)
	b, _ := os.ReadFile(pidPath(control, "disk-a"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "drive disk-a: qemu-nbd failed: signal: killed") || ExitCode(err) != ExitFailed {
			t.Errorf("Target = %v; want disk-a's failure", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Target did not return after a qemu-nbd died")
	}
	for _, tg := range targets {
		if exists(MarkerPath(tg.File)) {
			t.Errorf("%s has a marker after a failure", tg.Drive)
		}
	}
}

// TestTargetRefuses: what is there already is refused before anything is written or started.
func TestTargetRefuses(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(claimDir(t, dir, "prev"), "disk.img")
	if err := os.WriteFile(base, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	unmarked := filepath.Join(claimDir(t, dir, "unmarked"), "disk.img")
	if err := os.WriteFile(unmarked, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeMarker(base, Marker{Size: 4096}); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(claimDir(t, dir, "existing"), "disk.img")
	if err := os.WriteFile(existing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	marked := filepath.Join(claimDir(t, dir, "marked"), "disk.img")
	if err := writeMarker(marked, Marker{}); err != nil {
		t.Fatal(err)
	}
	fresh := func() string { return filepath.Join(claimDir(t, t.TempDir(), "new"), "disk.img") }
	leftover := t.TempDir()
	if err := os.WriteFile(filepath.Join(leftover, ReadyName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		control string
		target  TargetSpec
		want    string
	}{
		{"file exists", t.TempDir(), TargetSpec{Drive: "root", File: existing, Size: 512}, existing + " exists already: a copier pod is never restarted"},
		{"marker exists", t.TempDir(), TargetSpec{Drive: "root", File: marked, Size: 512}, MarkerPath(marked) + " exists already"},
		{"no claim", t.TempDir(), TargetSpec{Drive: "root", File: "/nonexistent/claim/disk.img", Size: 512}, "is the snapshot's claim mounted at /nonexistent/claim?"},
		{"no control dir", "/nonexistent/control", TargetSpec{Drive: "root", File: fresh(), Size: 512}, "--control-dir /nonexistent/control is not a directory"},
		{"leftover ready", leftover, TargetSpec{Drive: "root", File: fresh(), Size: 512}, ReadyName + " exists already"},
		{"base size", t.TempDir(), TargetSpec{Drive: "root", File: fresh(), Size: 8192, Base: base}, "base " + base + " is 4096 bytes and size is 8192"},
		{"base missing", t.TempDir(), TargetSpec{Drive: "root", File: fresh(), Size: 512, Base: "/nonexistent/disk.img"}, "base /nonexistent/disk.img: stat"},
		{"base unmarked", t.TempDir(), TargetSpec{Drive: "root", File: fresh(), Size: 8192, Base: unmarked}, "is not a completed snapshot disk"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// qemu-nbd is not run: the refusals come first.
			err := Target(context.Background(), c.control, []TargetSpec{c.target}, TargetOptions{QEMUNBD: "/nonexistent/qemu-nbd"})
			if err == nil || !strings.Contains(err.Error(), c.want) || ExitCode(err) != ExitRefused {
				t.Errorf("Target = %v (exit %d); want a refusal with %q", err, ExitCode(err), c.want)
			}
			if c.target.File != existing && exists(c.target.File) {
				t.Errorf("%s was created", c.target.File)
			}
		})
	}
}
