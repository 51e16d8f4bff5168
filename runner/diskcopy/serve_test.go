package diskcopy

import (
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

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// serving is one Serve run in the background.
type serving struct {
	control string
	done    chan error
	stop    context.CancelFunc
}

// serve starts Serve on d and waits for its socket.
func serve(t *testing.T, nbd string, d runnerconfig.Disk, stateDir string) *serving {
	t.Helper()
	s := &serving{control: t.TempDir(), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	t.Cleanup(cancel)
	go func() {
		s.done <- Serve(ctx, s.control, d, ServeOptions{QEMUNBD: nbd, StateDir: stateDir, Log: zaptest.NewLogger(t), StopGrace: 2 * time.Second})
	}()
	waitFile(t, s.sock(), s.done)
	return s
}

func (s *serving) sock() string { return filepath.Join(s.control, controlapi.AttachmentSocket) }

// end stops Serve as SIGTERM does and returns what it returned.
func (s *serving) end(t *testing.T) error {
	t.Helper()
	s.stop()
	select {
	case err := <-s.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after ctx ended")
		return nil
	}
}

// qemuIOResult runs qemu-io on an NBD export and returns its output and whether it succeeded.
func qemuIOResult(export, sock string, readOnly bool, cmds ...string) (string, bool) {
	args := []string{"-f", "raw"}
	if readOnly {
		args = append(args, "-r")
	}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	args = append(args, "nbd+unix:///"+export+"?socket="+sock)
	out, err := exec.Command("qemu-io", args...).CombinedOutput()
	return string(out), err == nil && !strings.Contains(string(out), "failed") && !strings.Contains(string(out), "Pattern verification")
}

// TestServeClaim: a claim's disk is made sparse at its size, served for one client after
// another (persistent), and what the guest wrote is in the file once Serve stopped.
func TestServeClaim(t *testing.T) {
	nbd := needQEMUNBD(t)
	claim := claimDir(t, t.TempDir(), "data")
	file := filepath.Join(claim, runnerconfig.DiskFileName)
	s := serve(t, nbd, runnerconfig.Disk{Name: "data", Kind: runnerconfig.DiskFile, Path: claim, SizeMiB: 16}, "")
	if fi, err := os.Stat(file); err != nil || fi.Size() != 16*mib {
		t.Fatalf("the disk file: %v, %v; want 16 MiB", fi, err)
	}
	c := cmdline(t, filepath.Join(s.control, servePidFile))
	for _, w := range []string{"--socket=" + filepath.Join(s.control, serveTmpSocket), "--export-name=data", "--shared=1", "--persistent", "--format=raw", "--discard=unmap"} {
		if !strings.Contains(c, w) {
			t.Errorf("qemu-nbd: %s; want %s", c, w)
		}
	}
	if strings.Contains(c, "--read-only") {
		t.Errorf("qemu-nbd: %s; want it writable", c)
	}
	qemuIO(t, "data", s.sock(), "write -P 0xab 1M 64k")
	// A second client after the first left: QEMU reconnecting.
	if out, ok := qemuIOResult("data", s.sock(), true, "read -P 0xab 1M 64k"); !ok {
		t.Fatalf("reading back: %s", out)
	}
	if err := s.end(t); err != nil {
		t.Fatalf("Serve = %v, want nil after ctx ended", err)
	}
	wantContent(t, file, 16*mib, map[int64][2]int{mib: {64 << 10, 0xab}})
	if a := allocated(t, file); a > 256<<10 {
		t.Errorf("%d bytes allocated for 64 KiB of data: not sparse", a)
	}
	for _, p := range []string{s.sock(), filepath.Join(s.control, serveTmpSocket), filepath.Join(s.control, servePidFile)} {
		if exists(p) {
			t.Errorf("%s is left behind", p)
		}
	}
}

// TestServeKeepsDisk: a claim that holds a disk keeps it as it is, and a read-only one refuses
// the guest's writes.
func TestServeKeepsDisk(t *testing.T) {
	nbd := needQEMUNBD(t)
	claim := claimDir(t, t.TempDir(), "data")
	file := filepath.Join(claim, runnerconfig.DiskFileName)
	pattern(t, file, 0, 4096, 0x5a)
	if err := os.Truncate(file, 8*mib); err != nil {
		t.Fatal(err)
	}
	s := serve(t, nbd, runnerconfig.Disk{Name: "ro", Kind: runnerconfig.DiskFile, Path: claim, SizeMiB: 16, ReadOnly: true}, "")
	if c := cmdline(t, filepath.Join(s.control, servePidFile)); !strings.Contains(c, "--read-only") || strings.Contains(c, "--discard") {
		t.Errorf("qemu-nbd: %s; want --read-only, no --discard", c)
	}
	if out, ok := qemuIOResult("ro", s.sock(), false, "write -P 0xff 0 4k"); ok {
		t.Errorf("a write to a read-only disk succeeded: %s", out)
	}
	if out, ok := qemuIOResult("ro", s.sock(), true, "read -P 0x5a 0 4k"); !ok {
		t.Errorf("reading the disk: %s", out)
	}
	if err := s.end(t); err != nil {
		t.Fatal(err)
	}
	wantContent(t, file, 8*mib, map[int64][2]int{0: {4096, 0x5a}})
}

// TestServeEmptyAndFiles: an empty disk is blank whatever was there; a files disk is an ISO in
// the state folder, served read-only and removed after.
func TestServeEmptyAndFiles(t *testing.T) {
	nbd := needQEMUNBD(t)
	scratch := claimDir(t, t.TempDir(), "scratch")
	pattern(t, filepath.Join(scratch, runnerconfig.DiskFileName), 0, 4096, 0x77)
	s := serve(t, nbd, runnerconfig.Disk{Name: "scratch", Kind: runnerconfig.DiskEmpty, Path: scratch, SizeMiB: 4}, "")
	if out, ok := qemuIOResult("scratch", s.sock(), false, "read -P 0 0 4k", "write -P 0x42 2M 4k"); !ok {
		t.Fatalf("the empty disk: %s", out)
	}
	if err := s.end(t); err != nil {
		t.Fatal(err)
	}
	wantContent(t, filepath.Join(scratch, runnerconfig.DiskFileName), 4*mib, map[int64][2]int{2 * mib: {4096, 0x42}})

	conf := claimDir(t, t.TempDir(), "conf")
	if err := os.WriteFile(filepath.Join(conf, "app.ini"), []byte("key=value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	s = serve(t, nbd, runnerconfig.Disk{Name: "conf", Kind: runnerconfig.DiskFiles, Path: conf, ReadOnly: true}, state)
	iso := filepath.Join(state, "disk-conf.iso")
	if !exists(iso) {
		t.Fatalf("no ISO at %s", iso)
	}
	// ISO 9660's primary volume descriptor, at sector 16: "\x01CD001".
	if out, ok := qemuIOResult("conf", s.sock(), true, "read -P 0x01 32768 1"); !ok {
		t.Errorf("the ISO: %s", out)
	}
	if err := s.end(t); err != nil {
		t.Fatal(err)
	}
	if exists(iso) {
		t.Errorf("the ISO %s is left behind", iso)
	}
}

// TestServeFailure: a qemu-nbd that fails at start, or dies while serving, fails Serve with its
// stderr.
func TestServeFailure(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "qemu-nbd")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'qemu-nbd: Failed to blk_new_open: boom' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := runnerconfig.Disk{Name: "data", Kind: runnerconfig.DiskFile, Path: claimDir(t, t.TempDir(), "data"), SizeMiB: 1}
	err := Serve(context.Background(), t.TempDir(), d, ServeOptions{QEMUNBD: fake})
	if err == nil || !strings.Contains(err.Error(), "boom") || ExitCode(err) != ExitFailed {
		t.Errorf("Serve = %v (exit %d); want qemu-nbd's stderr, exit %d", err, ExitCode(err), ExitFailed)
	}

	nbd := needQEMUNBD(t)
	s := serve(t, nbd, runnerconfig.Disk{Name: "data", Kind: runnerconfig.DiskFile, Path: claimDir(t, t.TempDir(), "data"), SizeMiB: 1}, "")
	b, _ := os.ReadFile(filepath.Join(s.control, servePidFile))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		if err == nil || !strings.Contains(err.Error(), "qemu-nbd exited: signal: killed") || ExitCode(err) != ExitFailed {
			t.Errorf("Serve = %v; want qemu-nbd's death", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after qemu-nbd died")
	}
	if exists(s.sock()) {
		t.Error("the socket is left behind")
	}

	// A block disk that is not a device is the runner's own check's failure.
	err = Serve(context.Background(), t.TempDir(), runnerconfig.Disk{Name: "dev", Kind: runnerconfig.DiskBlock, Path: "/dev/null"}, ServeOptions{QEMUNBD: fake})
	if err == nil || !strings.Contains(err.Error(), "is not a block device") {
		t.Errorf("Serve of /dev/null as a block disk = %v", err)
	}
}

// TestServeRefuses: hostile or mistaken flags are refused before anything is made or started.
func TestServeRefuses(t *testing.T) {
	dir := t.TempDir()
	claim := claimDir(t, dir, "data")
	planted := t.TempDir()
	if err := os.WriteFile(filepath.Join(planted, controlapi.AttachmentSocket), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	long := "/" + strings.Repeat("c", 100)
	ok := runnerconfig.Disk{Name: "data", Kind: runnerconfig.DiskFile, Path: claim}
	with := func(f func(*runnerconfig.Disk)) runnerconfig.Disk { d := ok; f(&d); return d }
	for name, c := range map[string]struct {
		control, state string
		disk           runnerconfig.Disk
		want           string
	}{
		"dotdot path":      {"", "", with(func(d *runnerconfig.Disk) { d.Path = claim + "/../../etc" }), "want a clean absolute path"},
		"relative path":    {"", "", with(func(d *runnerconfig.Disk) { d.Path = "data" }), "want a clean absolute path"},
		"comma path":       {"", "", with(func(d *runnerconfig.Disk) { d.Path = claim + ",x" }), "want a clean absolute path"},
		"image":            {"", "", with(func(d *runnerconfig.Disk) { d.Kind = runnerconfig.DiskImage; d.ReadOnly = true }), `kind "image"`},
		"no kind":          {"", "", with(func(d *runnerconfig.Disk) { d.Kind = "" }), `kind ""`},
		"bad name":         {"", "", with(func(d *runnerconfig.Disk) { d.Name = "../x" }), "want a disk name"},
		"root":             {"", "", with(func(d *runnerconfig.Disk) { d.Name = "root" }), "not root or cidata"},
		"slot":             {"", "", with(func(d *runnerconfig.Disk) { d.Hotplug, d.Slot = true, 1 }), "the runner's"},
		"migrate":          {"", "", with(func(d *runnerconfig.Disk) { d.Migrate = runnerconfig.MigrateCopy }), "the runner's"},
		"writable files":   {"", dir, with(func(d *runnerconfig.Disk) { d.Kind = runnerconfig.DiskFiles }), "always readonly"},
		"files, no state":  {"", "", with(func(d *runnerconfig.Disk) { d.Kind, d.ReadOnly = runnerconfig.DiskFiles, true }), "--state-dir"},
		"read-only empty":  {"", "", with(func(d *runnerconfig.Disk) { d.Kind, d.ReadOnly, d.SizeMiB = runnerconfig.DiskEmpty, true, 1 }), "drop readonly"},
		"sizeless empty":   {"", "", with(func(d *runnerconfig.Disk) { d.Kind = runnerconfig.DiskEmpty }), "at least 1"},
		"sized block":      {"", "", with(func(d *runnerconfig.Disk) { d.Kind, d.SizeMiB = runnerconfig.DiskBlock, 4 }), "only for file and empty"},
		"relative control": {"control", "", ok, "--control-dir"},
		"long control":     {long, "", ok, "too long"},
		"no control":       {"/nonexistent/control", "", ok, "is not a directory"},
		"planted socket":   {planted, "", ok, "is there and not a socket"},
	} {
		t.Run(name, func(t *testing.T) {
			control := c.control
			if control == "" {
				control = t.TempDir()
			}
			err := Serve(context.Background(), control, c.disk, ServeOptions{QEMUNBD: "/nonexistent/qemu-nbd", StateDir: c.state})
			if err == nil || !strings.Contains(err.Error(), c.want) || ExitCode(err) != ExitRefused {
				t.Errorf("Serve = %v (exit %d); want a refusal with %q", err, ExitCode(err), c.want)
			}
			if _, err := os.Stat(filepath.Join(claim, runnerconfig.DiskFileName)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the disk was made: %v", err)
			}
		})
	}
}
