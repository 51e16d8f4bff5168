package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/pkg/controlapi"
)

// The backup checks (PUT /v1/backup): the node agent's part is played by qemu-nbd, which serves
// a raw target file on a socket in the runner's control directory and exits once the runner's
// QEMU disconnected.

// backupSource is a drive the check backs up and the host file (or device) behind it.
type backupSource struct {
	drive, path string
	size        int64
}

// checkBackup backs up r's running guest's drives data (a claim's disk file, left sparse) and
// raw (a block device), at one instant: after the guest wrote 4 MiB to raw, a full backup with
// the file systems frozen, whose targets equal the disks; after 1 MiB more, an incremental one
// onto copies of the first, which copies about that much of raw and nothing of data, and leaves
// the targets equal to the disks again. Then a backup that fails, and refusals.
func checkBackup(t *testing.T, r *runnerProc, data, raw string) {
	t.Helper()
	need(t, haveBinary("qemu-nbd"), "needs qemu-nbd (qemu-utils)")
	srcs := []backupSource{{"disk-data", data, 0}, {"disk-raw", raw, 0}}
	full, incr := make([]string, len(srcs)), make([]string, len(srcs))
	dir := t.TempDir()
	for i := range srcs {
		srcs[i].size = fileSize(t, srcs[i].path)
		full[i], incr[i] = filepath.Join(dir, srcs[i].drive+"-full.img"), filepath.Join(dir, srcs[i].drive+"-incr.img")
	}
	checkDrives(t, r, srcs)
	guestWrite(t, r, "raw", 4, 4)
	code, st := backupOnto(t, r, srcs, full, nil, controlapi.BackupRequest{Bitmap: "b1", Freeze: true}, "")
	if code != http.StatusOK || st.Consistency != controlapi.ConsistencyGuestFrozen || st.FrozenFilesystems < 1 || st.Bitmap != "b1" || len(st.Drives) != 2 {
		t.Fatalf("full backup: %d %+v", code, st)
	}
	for i, s := range srcs {
		if d := st.Drives[i]; d.Drive != s.drive || d.Size != s.size || d.Copied != s.size || d.Incremental {
			t.Errorf("full backup of %s: %+v, want all its %d bytes copied", s.drive, d, s.size)
		}
		sameBytes(t, full[i], s.path)
	}
	t.Logf("full backup: %+v", st)

	guestWrite(t, r, "raw", 10, 1)
	code, st = backupOnto(t, r, srcs, incr, full, controlapi.BackupRequest{Bitmap: "b2"}, "b1")
	if code != http.StatusOK || st.Consistency != controlapi.ConsistencyCrash || st.Bitmap != "b2" || len(st.Drives) != 2 {
		t.Fatalf("incremental backup: %d %+v", code, st)
	}
	if d := st.Drives[0]; d.Copied > 1<<20 || !d.Incremental {
		t.Errorf("incremental backup of data, unchanged: %+v, want at most 1 MiB copied", d)
	}
	if d := st.Drives[1]; d.Copied < 1<<20 || d.Copied > 4<<20 || !d.Incremental {
		t.Errorf("incremental backup of raw after 1 MiB written: %+v, want 1 to 4 MiB copied", d)
	}
	for i, s := range srcs {
		sameBytes(t, incr[i], s.path)
	}
	t.Logf("incremental backup: %+v", st)
	checkBackupFailure(t, r, srcs[1], incr[1])
	checkBackupRefusals(t, r)
}

// backupOnto serves a target per source (a copy of from's, when from is not nil) with qemu-nbd
// and asks for req with those drives (since the bitmap since); every qemu-nbd must have been
// disconnected by the answer.
func backupOnto(t *testing.T, r *runnerProc, srcs []backupSource, targets, from []string, req controlapi.BackupRequest, since string) (int, controlapi.BackupStatus) {
	t.Helper()
	var served []<-chan struct{}
	for i, s := range srcs {
		if from != nil {
			copyFile(t, from[i], targets[i])
		}
		d, done := serveTarget(t, r, s, targets[i], since, "none")
		req.Drives, served = append(req.Drives, d), append(served, done)
	}
	code, st := putBackup(t, r, req)
	disconnected(t, served)
	return code, st
}

// checkBackupFailure: a target that fails during the copy (its file system is full) fails the
// backup (500, naming the drive), and the drive keeps the bitmap it had and not the new one: the
// same incremental backup, new bitmap's name and all, then succeeds onto a good target.
func checkBackupFailure(t *testing.T, r *runnerProc, raw backupSource, last string) {
	t.Helper()
	guestWrite(t, r, "raw", 12, 2)
	small := t.TempDir()
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(small, unix.MNT_DETACH) })
	d, done := serveTarget(t, r, raw, filepath.Join(small, "raw.img"), "b2", "writeback")
	code, st := putBackup(t, r, controlapi.BackupRequest{Bitmap: "b3", Drives: []controlapi.BackupDrive{d}})
	disconnected(t, []<-chan struct{}{done})
	if code != http.StatusInternalServerError || st.State != controlapi.BackupFailed || !strings.Contains(st.Error, "disk-raw") {
		t.Fatalf("a backup onto a full file system: %d %+v, want 500 naming disk-raw", code, st)
	}
	t.Logf("a backup onto a full file system: %+v", st)
	target := filepath.Join(t.TempDir(), "raw.img")
	code, st = backupOnto(t, r, []backupSource{raw}, []string{target}, []string{last}, controlapi.BackupRequest{Bitmap: "b3"}, "b2")
	if code != http.StatusOK || len(st.Drives) != 1 || st.Drives[0].Copied < 2<<20 || st.Drives[0].Copied > 5<<20 {
		t.Fatalf("the incremental backup again after the failure: %d %+v, want the 2 MiB written since b2 copied", code, st)
	}
	sameBytes(t, target, raw.path)
}

// checkBackupRefusals: drives and bitmaps the guest does not have are refused before anything
// is copied, naming the drive; each backup's Since bitmap went once it completed.
func checkBackupRefusals(t *testing.T, r *runnerProc) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(filepath.Dir(r.control), "refused.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, c := range []struct{ drive, since, want string }{
		{"disk-data", "snap-x", "drive disk-data has no bitmap snap-x: the guest's QEMU restarted or migrated since that backup; take a full one"},
		{"disk-data", "b1", "drive disk-data has no bitmap b1"},
		{"disk-raw", "b2", "drive disk-raw has no bitmap b2"},
		{"disk-tools", "", "drive disk-tools is read-only"},
		{"disk-nope", "", "drive disk-nope: the guest has no such drive"},
	} {
		req := controlapi.BackupRequest{Bitmap: "b4", Drives: []controlapi.BackupDrive{{Drive: c.drive, Socket: "refused.sock", Since: c.since}}}
		if code, st := putBackup(t, r, req); code != http.StatusConflict || !strings.Contains(st.Error, c.want) {
			t.Errorf("backup of %s since %q: %d %+v, want 409 %q", c.drive, c.since, code, st, c.want)
		}
	}
}

// guestWrite has r's guest write mib MiB of random data at offset atMiB MiB of its disk with
// serial, directly and synced.
func guestWrite(t testing.TB, r *runnerProc, serial string, atMiB, mib int) {
	t.Helper()
	guestRun(t, r, fmt.Sprintf(`for d in /sys/block/vd*; do [ "$(/bin/busybox cat $d/serial)" = %s ] && `+
		`/bin/busybox dd if=/dev/urandom of=/dev/${d##*/} bs=1M seek=%d count=%d oflag=direct conv=notrunc,fsync 2>/dev/null && `+
		`/bin/busybox sync && echo VIRTPOD-WROTE-$((%d+1000)); done`, serial, atMiB, mib, atMiB), fmt.Sprintf("VIRTPOD-WROTE-%d", atMiB+1000))
}

// serveTarget serves target, a file of s's size (made empty when it does not exist), with
// qemu-nbd (cache mode cache) on a socket in r's control directory under s's drive name, and returns the request
// for it, and a channel closed once qemu-nbd exited: its client disconnected.
func serveTarget(t testing.TB, r *runnerProc, s backupSource, target, since, cache string) (controlapi.BackupDrive, <-chan struct{}) {
	t.Helper()
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o600)
	if err == nil {
		err = f.Truncate(s.size)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	name := "backup-" + s.drive + ".sock"
	sock := filepath.Join(filepath.Dir(r.control), name)
	_ = os.Remove(sock)
	cmd := exec.Command("qemu-nbd", "--socket="+sock, "--format=raw", "--export-name="+s.drive, "--shared=1",
		"--cache="+cache, "--aio=threads", "--discard=unmap", target)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	for end := time.Now().Add(10 * time.Second); !isSocketFile(sock); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("qemu-nbd did not listen on %s", sock)
		}
	}
	return controlapi.BackupDrive{Drive: s.drive, Socket: name, Since: since}, done
}

// disconnected fails unless every target's qemu-nbd exited: the runner closed its connections
// before it answered.
func disconnected(t testing.TB, served []<-chan struct{}) {
	t.Helper()
	for _, done := range served {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("qemu-nbd still serves a target 10s after the backup's answer: the runner did not disconnect")
		}
	}
}

func isSocketFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().Type() == os.ModeSocket
}

// putBackup asks r's control API for a backup.
func putBackup(t testing.TB, r *runnerProc, req controlapi.BackupRequest) (int, controlapi.BackupStatus) {
	t.Helper()
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	hr, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://runner"+controlapi.BackupPath, bytes.NewReader(body))
	resp, err := controlClient(r.control).c.Do(hr)
	if err != nil {
		t.Fatalf("PUT %s: %v", controlapi.BackupPath, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var st controlapi.BackupStatus
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("PUT %s: %d %q: %v", controlapi.BackupPath, resp.StatusCode, b, err)
	}
	return resp.StatusCode, st
}

// checkDrives: GET /v1/drives gives each writable drive's size as the disk has it, and says
// the tools disk is read-only.
func checkDrives(t *testing.T, r *runnerProc, srcs []backupSource) {
	t.Helper()
	resp, err := controlClient(r.control).c.Get("http://runner" + controlapi.DrivesPath)
	if err != nil {
		t.Fatalf("GET %s: %v", controlapi.DrivesPath, err)
	}
	defer resp.Body.Close()
	var drives []controlapi.Drive
	if err := json.NewDecoder(resp.Body).Decode(&drives); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", controlapi.DrivesPath, resp.StatusCode, err)
	}
	got := map[string]controlapi.Drive{}
	for _, d := range drives {
		got[d.Drive] = d
	}
	for _, s := range srcs {
		if d := got[s.drive]; d.SizeBytes != s.size || d.ReadOnly {
			t.Errorf("GET %s: %s is %+v, want %d bytes, writable", controlapi.DrivesPath, s.drive, d, s.size)
		}
	}
	if d, ok := got["disk-tools"]; !ok || !d.ReadOnly {
		t.Errorf("GET %s: disk-tools %+v, want it listed read-only", controlapi.DrivesPath, d)
	}
}

// guestRun types cmd into r's guest console and waits until it finished; want, when not empty,
// must be in what it printed. The end marker is computed by the shell, so the echo of the
// typed line cannot match it.
func guestRun(t testing.TB, r *runnerProc, cmd, want string) {
	t.Helper()
	con := attachLocalConsole(t, runnerBinary(t), r.stateDir)
	n := time.Now().UnixNano() % 100000
	if _, err := fmt.Fprintf(con.in, "%s; echo DONE-$((%d+1))\n", cmd, n); err != nil {
		t.Fatal(err)
	}
	end := fmt.Sprintf("DONE-%d", n+1)
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if out := con.out.String(); strings.Contains(out, end) {
			if !strings.Contains(out, want) {
				t.Fatalf("%q printed %q, want %q", cmd, out, want)
			}
			return
		}
	}
	t.Fatalf("%q did not finish on the console:\n%s", cmd, tail(con.out.String(), 10))
}

func fileSize(t testing.TB, p string) int64 {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := f.Seek(0, io.SeekEnd) // a block device's size too
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err == nil {
		_, err = io.Copy(out, in)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// sameBytes fails unless the backup target holds what the disk at source holds, and says
// where they first differ.
func sameBytes(t testing.TB, target, source string) {
	t.Helper()
	a, err := os.Open(target)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := os.Open(source)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ba, bb := make([]byte, 4<<20), make([]byte, 4<<20)
	for off := int64(0); ; off += int64(len(ba)) {
		na, erra := io.ReadFull(a, ba)
		nb, errb := io.ReadFull(b, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			i := 0
			for i < na && i < nb && ba[i] == bb[i] {
				i++
			}
			t.Errorf("backup %s differs from %s from byte %d (MiB %d) on", target, source, off+int64(i), (off+int64(i))>>20)
			return
		}
		if erra != nil || errb != nil {
			return
		}
	}
}
