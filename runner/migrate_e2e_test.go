package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/volumedisk"
	"github.com/virtpod/virtpod/runner"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/runner/podcontrol"
	"github.com/virtpod/virtpod/tests/prereq"
)

// TestLiveMigration boots one guest, printing a numbered heartbeat every 50 ms, and drives the
// runner's side of live migration against it with a relay in the node agents' place (its
// migrate-out.sock to the target's migrate-in.sock). One boot serves every case, in this order:
//   - the move (QEMU 7.2 to 7.2): the heartbeat goes on at the target from where the source
//     stopped (no reboot), what the guest wrote to its disks is there (copied, or on the shared
//     claim both attach), GET reports bytes and downtime, the source reports migrated and exits 0
//     on SIGTERM without the guest seeing a power button, the target runs; then the guest moves
//     on from that target onto QEMU 10.0, and within 10.0;
//   - there, cancel: DELETE while the disks are copied (before any memory); the guest keeps
//     running at the source, a second send can start at once; the target, stopped, exits naming
//     the cause;
//   - the target killed mid-stream: the source reports failed and its guest keeps running;
//   - resume after completed: the guest moved, its target died, DELETE runs it at the source.
func TestLiveMigration(t *testing.T) {
	// Each runner in a network namespace of its own, as in its own pod: the guest keeps
	// 10.0.2.2 behind a different pod IP after each move.
	for _, network := range []string{"masquerade"} {
		t.Run("network="+network, func(t *testing.T) { testLiveMigration(t, network) })
	}
}

func testLiveMigration(t *testing.T, network string) {
	guest := needResizeGuest(t)
	mt := newMigrationTest(t, guest, "vm-migrate", network, 256)
	src := mt.boot(t)
	srcCtl := migrationClient(src.r.control)

	// Refusals: nothing listening on migrate-out.sock; a PUT to a target.
	if code, s := srcCtl.do(t, http.MethodPut, `{"autoConverge":true}`); code != http.StatusConflict || !strings.Contains(s.Error, "nothing listens on") {
		t.Fatalf("PUT without a listener: %d %+v", code, s)
	}
	if code, s := srcCtl.do(t, http.MethodGet, ""); code != http.StatusOK || s.Role != "" || s.State != controlapi.MigrationNone {
		t.Fatalf("GET before any migration: %d %+v", code, s)
	}
	// A file the guest writes to its root disk, out of its page cache, and words on its two
	// copied disks: the target must read them from the disks the mirrors copied.
	consoleRun(t, src.r, "echo moved-$((6*7)) >/migrated; sync; echo 3 >/proc/sys/vm/drop_caches")
	consoleRun(t, src.r, "echo data-$((6*7)) | dd of="+guestDisk("data")+" conv=fsync 2>/dev/null; echo scratch-$((6*7)) | dd of="+guestDisk("scratch")+" conv=fsync 2>/dev/null; echo shared-$((6*7)) | dd of="+guestDisk("shared")+" conv=fsync 2>/dev/null")
	// 8 MiB that are not zeroes on the claim, which a mirror must copy byte by byte: at 1 MiB/s
	// shared by three mirrors the copy lasts long enough to cancel in the middle of it.
	consoleRun(t, src.r, "dd if=/dev/urandom of="+guestDisk("data")+" bs=1M seek=4 count=8 conv=fsync 2>/dev/null")

	t.Run("move", func(t *testing.T) {
		dst := mt.target(t)
		dstCtl := migrationClient(dst.r.control)
		newMigrationRelay(t, src.r, dst.r)
		// The guest writes sector after sector of its data disk through the move (a few a second
		// under TCG): the mirror must carry the ones written at the source while it copies.
		consoleRun(t, src.r, "(i=1; while [ $i -le 2000 ]; do echo w$i | dd of="+guestDisk("data")+" bs=512 seek=$i count=1 conv=fsync 2>/dev/null; i=$((i+1)); sleep 0.05; done) & echo $! >/writer; sleep 1")
		srcCtl.put(t, MigrationRequestBody(0, 0), http.StatusAccepted)
		s := waitMigration(t, srcCtl, func(s runner.MigrationStatus) bool { return s.Terminal() })
		if s.State != controlapi.MigrationCompleted || s.TransferredBytes <= 0 || s.TotalBytes <= 0 || s.DowntimeMs <= 0 || s.TotalTimeMs <= 0 {
			t.Fatalf("source GET after the move: %+v", s)
		}
		t.Logf("moved: %+v", s)
		dst.waitRunning(t)
		if g := waitMigration(t, dstCtl, func(s runner.MigrationStatus) bool { return s.Terminal() }); g.State != controlapi.MigrationCompleted || g.Role != controlapi.RoleTarget {
			t.Fatalf("target GET after the move: %+v", g)
		} else {
			t.Logf("target GET after the move: %+v", g)
		}
		if code, _ := runnerGet(t, dst.r.stateDir, "/startedz"); code != http.StatusOK {
			t.Fatalf("target /startedz after the move: %d", code)
		}
		// The counter goes on at the target from where it stopped at the source: no reboot.
		last := src.lastHeartbeat()
		first := dst.waitHeartbeat(t)
		if first <= last || first > last+3 {
			t.Fatalf("heartbeat %d last at the source, %d first at the target: want the next one", last, first)
		}
		if out := dst.r.stdout.String(); strings.Contains(out, "Linux version") || strings.Contains(out, "VIRTPOD-GUEST-READY") {
			t.Fatalf("the guest booted again at the target:\n%s", tail(out, 20))
		}
		dst.heartbeatGoesOn(t)
		t.Logf("heartbeat %d at the source, %d at the target; QEMU's downtime %d ms", last, first, s.DowntimeMs)
		// The target's root claim is the guest's now: marked as filled (by the migration), so
		// no later start fills it from the image again, and no longer as being received.
		if m, err := volumedisk.ReadMarker(dst.rootClaim(t)); err != nil || !m.Migrated || m.SizeBytes != 128<<20 {
			t.Errorf("the target's root claim's fill marker: %+v, %v; want migrated, 128 MiB", m, err)
		}
		if err := volumedisk.CheckComplete(dst.rootClaim(t)); err != nil {
			t.Errorf("the target's root claim after the move: %v", err)
		}
		// The mirrors copied the root overlay and the two writable disks, not the shared claim
		// (the target attached it) nor the read-only cloud-init seed.
		if want := []string{"root", "disk-data", "disk-scratch"}; !slices.Equal(s.Disks, want) || s.DiskBytes <= 0 {
			t.Errorf("mirrored disks %q, %d bytes; want %q", s.Disks, s.DiskBytes, want)
		}
		if mt.network == "masquerade" {
			// The guest kept its address (10.0.2.2, from its boot) and answers at the new
			// pod's IP, from outside that pod.
			if !strings.Contains(src.r.stdout.String(), "ip=10.0.2.2 ") {
				t.Fatalf("the guest did not boot at 10.0.2.2:\n%s", tail(src.r.stdout.String(), 5))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			body, err := httpGet(ctx, "http://"+dst.podIP+"/")
			cancel()
			if err != nil || !strings.Contains(body, "virtpod guest vm-migrate") {
				t.Fatalf("the moved guest at the target's pod IP %s: %q, %v", dst.podIP, body, err)
			}
		}
		// What the guest wrote before the move is on the target's disks, and every sector the
		// writer wrote at the source and then here, with no gap.
		consoleRun(t, dst.r, "echo 3 >/proc/sys/vm/drop_caches; cat /migrated", "moved-42")
		// The shared claim is the one volume: what the guest wrote there at the source it reads
		// at the target, and what it writes at the target is in the volume's file.
		consoleRun(t, dst.r, "head -c 9 "+guestDisk("shared")+"; echo; echo at-target-$((6*7)) | dd of="+guestDisk("shared")+" bs=512 seek=1 conv=fsync 2>/dev/null", "shared-42")
		if b, err := os.ReadFile(filepath.Join(sharedClaim(t, mt), runnerconfig.DiskFileName)); err != nil || !strings.HasPrefix(string(b), "shared-42\n") || !strings.HasPrefix(string(b[512:]), "at-target-42\n") {
			t.Errorf("the shared claim's file after the move: %q, %v; want what the guest wrote on both sides", tail(string(b[:min(len(b), 600)]), 2), err)
		}
		consoleRun(t, dst.r, "kill $(cat /writer); sleep 0.2; echo 3 >/proc/sys/vm/drop_caches; D="+guestDisk("data")+
			"; head -c 8 $D; head -c 11 "+guestDisk("scratch")+
			"; n=0; while [ \"$(dd if=$D bs=512 skip=$((n+1)) count=1 2>/dev/null | head -n1)\" = w$((n+1)) ]; do n=$((n+1)); done"+
			"; g=$(dd if=$D bs=512 skip=$((n+2)) count=1 2>/dev/null | head -c 1 | tr -d '\\000'); echo; echo WRITER-SECTORS-$n-THEN-[$g]",
			"data-42", "scratch-42", "WRITER-SECTORS-")
		if strings.Contains(dst.r.stdout.String(), "-THEN-[w]") {
			t.Errorf("a gap in the writer's sectors: a sector written at the source is missing on the target")
		}
		if n := writerSectors(dst.r.stdout.String()); n < 3 {
			t.Errorf("the writer's sectors on the target: %d in a row, want those it wrote through the move", n)
		} else {
			t.Logf("the writer's sectors on the target: %d in a row", n)
		}

		src.wantState(t, runner.StateMigrated)
		src.r.signal(t, syscall.SIGTERM)
		// At once (QMP quit), not after the grace period (20 s) of a power button nobody sees.
		if code, msg := src.r.waitExit(t, 5*time.Second); code != runner.ExitOK || msg != runner.MessageMigrated {
			t.Fatalf("source after SIGTERM: exit %d %q", code, msg)
		}
		if log := src.r.stderr.String(); strings.Contains(log, "powering the guest down") {
			t.Fatalf("the source pressed the power button of a guest that lives elsewhere:\n%s", grepLines(log, "power"))
		}
		// The guest saw no power button: it keeps running at the target.
		dst.heartbeatGoesOn(t)
		for _, r := range []*runnerProc{src.r, dst.r} {
			if strings.Contains(r.stdout.String(), "reboot: Power down") {
				t.Fatalf("the guest powered down:\n%s", tail(r.stdout.String(), 10))
			}
		}
		dst.wantState(t, runner.StateRunning)

		// The guest moves on from the pod it arrived in (a drain of that node): a target whose
		// guest arrived is a source like any other. It moves onto QEMU 10.0 (Debian 13's, no
		// block migration), keeping its machine (pc-q35-7.2), then once more within 10.0.
		consoleRun(t, dst.r, "echo again-$((7*6)) >/migrated2; sync")
		qemu10 := qemuNext(t)
		prev, prevCtl := dst, dstCtl
		for hop, want := range []string{"QEMU 7.2 to 10.0", "QEMU 10.0 to 10.0"} {
			next := mt.targetWith(t, qemu10)
			newMigrationRelay(t, prev.r, next.r)
			// Its arrival's "completed" is not this send's: right after the PUT QEMU is still connecting.
			if s := prevCtl.put(t, MigrationRequestBody(0, 0), http.StatusAccepted); s.Terminal() || s.Role != controlapi.RoleSource {
				t.Fatalf("%s: PUT on the former target answered %+v", want, s)
			}
			if s := waitMigration(t, prevCtl, func(s runner.MigrationStatus) bool { return s.Terminal() }); s.State != controlapi.MigrationCompleted || s.Role != controlapi.RoleSource || len(s.Disks) != 3 {
				t.Fatalf("%s: %+v", want, s)
			} else {
				t.Logf("%s: %+v", want, s)
			}
			next.waitRunning(t)
			if v := next.status(t).Version; !strings.HasPrefix(v, "10.0.") {
				t.Fatalf("%s: the target runs QEMU %q", want, v)
			}
			if last, first := prev.lastHeartbeat(), next.waitHeartbeat(t); first <= last || first > last+3 {
				t.Fatalf("%s: heartbeat %d last at the source, %d first at the target", want, last, first)
			}
			next.heartbeatGoesOn(t)
			consoleRun(t, next.r, "echo 3 >/proc/sys/vm/drop_caches; cat /migrated /migrated2; head -c 8 "+guestDisk("data"), "moved-42", "again-42", "data-42")
			prev.r.signal(t, syscall.SIGTERM)
			if code, msg := prev.r.waitExit(t, 5*time.Second); code != runner.ExitOK || msg != runner.MessageMigrated {
				t.Fatalf("%s: source after SIGTERM: exit %d %q", want, code, msg)
			}
			if hop == 0 {
				consoleRun(t, next.r, "echo on-ten-$((6*7)) >/migrated3; sync")
			} else {
				consoleRun(t, next.r, "echo 3 >/proc/sys/vm/drop_caches; cat /migrated3", "on-ten-42")
			}
			prev, prevCtl = next, migrationClient(next.r.control)
		}
		// The failures, on the guest where it arrived last (QEMU 10.0), each target a QEMU 10.0
		// too: the e2e test meets them on QEMU 7.2.
		src, srcCtl = prev, prevCtl
		target := func(t *testing.T) *migrationRunner { return mt.targetWith(t, qemu10) }
		t.Run("cancel", func(t *testing.T) {
			dst := target(t)
			dstCtl := migrationClient(dst.r.control)
			if code, s := dstCtl.do(t, http.MethodPut, `{}`); code != http.StatusConflict || !strings.Contains(s.Error, "migration target") || s.Role != controlapi.RoleTarget || s.State != controlapi.MigrationWaiting {
				t.Fatalf("PUT on the target: %d %+v", code, s)
			}
			if code, body := runnerGet(t, dst.r.stateDir, "/startedz"); code != http.StatusServiceUnavailable || !strings.Contains(body, runner.StateIncoming) {
				t.Fatalf("target /startedz while waiting: %d %q", code, body)
			}
			newMigrationRelay(t, src.r, dst.r)
			srcCtl.put(t, MigrationRequestBody(1, 0), http.StatusAccepted)
			// Cancelled while the disks are still being copied, before any memory is sent.
			mirroring := waitMigration(t, srcCtl, func(s runner.MigrationStatus) bool { return s.TransferredBytes > 0 })
			if mirroring.State != controlapi.MigrationActive || mirroring.DiskBytes != mirroring.TransferredBytes || len(mirroring.Disks) != 3 {
				t.Fatalf("while the disks are copied: %+v", mirroring)
			}
			if code, s := srcCtl.do(t, http.MethodPut, `{}`); code != http.StatusConflict || !strings.Contains(s.Error, "already active") {
				t.Fatalf("a second PUT while active: %d %+v", code, s)
			}
			// The target's QEMU has no memory stream yet: it still waits, while its disks fill.
			if code, got := dstCtl.do(t, http.MethodGet, ""); code != http.StatusOK || got.Role != controlapi.RoleTarget || got.State != controlapi.MigrationWaiting {
				t.Fatalf("target GET while the disks are copied: %d %+v", code, got)
			}
			code, s := srcCtl.do(t, http.MethodDelete, "")
			if code != http.StatusOK || s.State != controlapi.MigrationCancelled || s.Role != controlapi.RoleSource {
				t.Fatalf("DELETE while the disks are copied: %d %+v", code, s)
			}
			src.heartbeatGoesOn(t)
			if got := srcCtl.put(t, MigrationRequestBody(1, 0), http.StatusAccepted); got.State != controlapi.MigrationActive {
				t.Fatalf("a send after the cancel: %+v", got) // the cancelled one's mirrors are gone
			}
			if code, s := srcCtl.do(t, http.MethodDelete, ""); code != http.StatusOK || s.State != controlapi.MigrationCancelled {
				t.Fatalf("DELETE of the second send: %d %+v", code, s)
			}
			// The controller deletes a cancelled migration's target pod: its runner stops.
			dst.r.signal(t, syscall.SIGTERM)
			if code, msg := dst.r.waitExit(t, 30*time.Second); code != runner.ExitIncomingFailed || !strings.Contains(msg, "before the guest arrived") {
				t.Fatalf("target after the cancel: exit %d %q", code, msg)
			}
			t.Logf("target's message: %s", readFile(dst.r.termLog))
			// The claims it made for the mirrors are partial, and say so to any later runner.
			if err := volumedisk.CheckComplete(dst.rootClaim(t)); err == nil || !strings.Contains(err.Error(), "never completed here") {
				t.Errorf("the cancelled target's root claim: %v; want it refused as partial", err)
			}
		})

		t.Run("target killed mid-stream", func(t *testing.T) {
			dst := target(t)
			newMigrationRelay(t, src.r, dst.r)
			srcCtl.put(t, MigrationRequestBody(1, 0), http.StatusAccepted)
			waitMigration(t, srcCtl, func(s runner.MigrationStatus) bool { return s.TransferredBytes > 0 })
			dst.r.signal(t, syscall.SIGKILL) // QEMU dies with its runner (Pdeathsig)
			s := waitMigration(t, srcCtl, func(s runner.MigrationStatus) bool { return s.Terminal() })
			if s.State != controlapi.MigrationFailed || s.Error == "" {
				t.Fatalf("source after its target died: %+v, want failed with QEMU's reason", s)
			}
			t.Logf("source's status: %+v", s)
			src.heartbeatGoesOn(t)
			src.wantState(t, runner.StateRunning)
		})

		t.Run("resume after completed", func(t *testing.T) {
			dst := target(t)
			newMigrationRelay(t, src.r, dst.r)
			srcCtl.put(t, MigrationRequestBody(0, 0), http.StatusAccepted)
			s := waitMigration(t, srcCtl, func(s runner.MigrationStatus) bool { return s.Terminal() })
			if s.State != controlapi.MigrationCompleted {
				t.Fatalf("migration ended %+v", s)
			}
			src.wantState(t, runner.StateMigrated)
			dst.waitRunning(t)
			// The target dies; only then may the source run the guest again. The controller asks
			// once the target pod is gone, and a pod is gone when all its processes are: the
			// target's QEMU dies just after its runner (Pdeathsig), and until its last thread has
			// exited (its leader is a zombie before that) it holds the shared claim's image, which
			// QEMU then rightly refuses to take back (its write lock). A lock still held after
			// that fails the test, naming who holds it.
			hypervisors := dst.r.children()
			dst.r.signal(t, syscall.SIGKILL)
			dst.r.waitExit(t, 30*time.Second)
			waitGone(t, hypervisors, 30*time.Second)
			if code, s := srcCtl.do(t, http.MethodPut, `{}`); code != http.StatusConflict || !strings.Contains(s.Error, "already migrated away") {
				t.Fatalf("PUT after completed: %d %+v", code, s)
			}
			code, s := srcCtl.do(t, http.MethodDelete, "")
			for end := time.Now().Add(20 * time.Second); code == http.StatusInternalServerError && strings.Contains(s.Error, "lock") && time.Now().Before(end); {
				t.Errorf("who holds the shared claim's image:\n%s", lockHolders(filepath.Join(sharedClaim(t, mt), runnerconfig.DiskFileName)))
				time.Sleep(time.Second)
				code, s = srcCtl.do(t, http.MethodDelete, "")
			}
			if code != http.StatusOK || s.State != controlapi.MigrationCancelled || !strings.Contains(s.Error, "resumed here") {
				t.Fatalf("DELETE after completed: %d %+v", code, s)
			}
			src.heartbeatGoesOn(t)
			src.wantState(t, runner.StateRunning)
		})
		src.r.signal(t, syscall.SIGTERM)
		if code, msg := src.r.waitExit(t, 30*time.Second); code != runner.ExitOK || msg != "stopped on SIGTERM: guest powered off" {
			t.Fatalf("last runner after SIGTERM: exit %d %q", code, msg)
		}
	})
}

// qemuNext is Debian 13's QEMU 10.0 (make qemu-next), bind-mounted read-only, for the test's
// length, where the runner's user reaches it: the cache is under root's home.
func qemuNext(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("VIRTPOD_QEMU_NEXT")
	if dir == "" {
		dir = filepath.Join(prereq.Cache(), "qemu-next")
	}
	_, err := os.Stat(filepath.Join(dir, "qemu.json"))
	need(t, err == nil, "no QEMU 10.0 in "+dir+": run make qemu-next")
	reachable(t, nil) // makes the share directory
	at, err := os.MkdirTemp(shareDir, "qemu-next-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(at, 0o755)
	if err := unix.Mount(dir, at, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(at, unix.MNT_DETACH); _ = os.Remove(at) })
	if err := unix.Mount("", at, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("making %s read-only: %v", at, err)
	}
	return filepath.Join(at, "bin", "qemu-system-x86_64")
}

// sharedClaim is the folder of the test's shared claim (migrate=shared), which every runner
// attaches.
func sharedClaim(t testing.TB, mt *migrationTest) string {
	t.Helper()
	for _, a := range mt.args {
		if d, ok := strings.CutPrefix(a, "--disk=name=shared,kind=file,path="); ok {
			return strings.Split(d, ",")[0]
		}
	}
	t.Fatal("no shared claim")
	return ""
}

// migrationTest starts runners for one guest: the source boots it, each target receives it.
type migrationTest struct {
	args    []string
	network string
	pods    int // network namespaces made so far
}

func newMigrationTest(t testing.TB, guest, name, network string, memMiB int) *migrationTest {
	args := baseArgs(t, guest, name)
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--kernel-args="):
			args[i] = "--kernel-args=rw virtpod.heartbeat"
		case strings.HasPrefix(a, "--memory-mib="):
			args[i] = "--memory-mib=" + strconv.Itoa(memMiB)
		}
	}
	// Disks a move copies whole: claims of each runner's own (migrate=copy, as node-local
	// claims: the root disk, filled from its image at the first boot, and a data disk) and an
	// emptyDir disk. The e2e test moves a root overlay, mirrored over its base.
	args = append(args, "--root-volume=kind=file,path="+perRunnerDir+"-root,migrate=copy",
		"--disk=name=data,kind=file,path="+perRunnerDir+",size-mib=16,migrate=copy",
		"--disk=name=scratch,kind=empty,path="+perRunnerDir+"-scratch,size-mib=8",
		// And a claim every runner attaches, as a ReadWriteMany one: never copied.
		"--disk=name=shared,kind=file,path="+claimDir(t, network)+",size-mib=8,migrate=shared")
	// A cloud-init seed: a read-only drive, which the migration must leave alone.
	userData := filepath.Join(t.TempDir(), "user-data")
	if err := os.WriteFile(userData, []byte("#cloud-config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The machine pinned as the controller pins it, so the guest can move onto another QEMU.
	args = append(args, "--network="+network, "--cloud-init-user-data="+userData, "--instance-id=0b5f6a43-migrate", "--machine=pc-q35-7.2")
	if network == "masquerade" {
		args = append(args, "--port=http:80/TCP")
	}
	return &migrationTest{args: args, network: network}
}

func (mt *migrationTest) boot(t testing.TB) *migrationRunner {
	t.Helper()
	m := mt.start(t, mt.args)
	select {
	case <-m.r.markerSeen:
	case <-m.r.exited:
		t.Fatalf("runner exited before the guest marker: %s", readFile(m.r.termLog))
	case <-time.After(bootTimeout):
		t.Fatalf("no %s within %v", marker, bootTimeout)
	}
	m.heartbeatGoesOn(t)
	return m
}

// target starts a runner with --incoming and waits for it to wait for its guest.
func (mt *migrationTest) target(t testing.TB) *migrationRunner { return mt.targetWith(t, "") }

// targetWith is target with another QEMU binary ("": the host's).
func (mt *migrationTest) targetWith(t testing.TB, qemu string) *migrationRunner {
	t.Helper()
	if qemu != "" {
		restore := os.Getenv(binaries.EnvQEMU)
		os.Setenv(binaries.EnvQEMU, qemu) // the runner reads it at its start
		defer os.Setenv(binaries.EnvQEMU, restore)
	}
	m := mt.start(t, append(append([]string{}, mt.args...), "--incoming"))
	m.wantState(t, runner.StateIncoming)
	return m
}

// start starts a runner; with the masquerade network, in a pod-like network namespace of its own
// (10.213.40+n.2).
func (mt *migrationTest) start(t testing.TB, args []string) *migrationRunner {
	t.Helper()
	args = append([]string(nil), args...)
	for i, a := range args {
		for _, suffix := range []string{"-scratch", "-root", ""} {
			a = strings.ReplaceAll(a, perRunnerDir+suffix, claimDir(t, mt.network))
		}
		args[i] = a
	}
	if mt.network != "masquerade" {
		return startMigrationRunner(t, "", args)
	}
	tt, ok := t.(*testing.T)
	if !ok {
		t.Fatal("network namespaces are made for tests only")
	}
	mt.pods++
	ns := newPodNetns(tt, 40+mt.pods)
	m := startMigrationRunner(t, ns.name, append(args, "--resolv-conf="+ns.resolvConf))
	m.podIP = ns.podIP
	return m
}

// perRunnerDir in an argument (alone, or with -scratch or -root) is replaced with a directory
// of each runner's own: its claim.
const perRunnerDir = "/per-runner-dir"

// claimDir is a folder for a claim: the runner's user's when the runner runs as that user (in a
// pod's network namespace), root's otherwise (root without capabilities, startRunnerVia).
func claimDir(t testing.TB, network string) string {
	if network == "masquerade" {
		return runnerDir(t)
	}
	return t.TempDir()
}

// rootClaim is the folder of a runner's root claim (--root-volume).
func (m *migrationRunner) rootClaim(t testing.TB) string {
	t.Helper()
	for _, a := range m.r.cmd.Args {
		if v, ok := strings.CutPrefix(a, "--root-volume="); ok {
			d, err := runnerconfig.ParseDisk(v)
			if err != nil {
				t.Fatal(err)
			}
			return d.Path
		}
	}
	t.Fatal("no --root-volume")
	return ""
}

// guestDisk is the shell's name of the guest's disk with serial.
func guestDisk(serial string) string {
	return `$(for b in /sys/block/vd*; do [ "$(cat $b/serial 2>/dev/null)" = ` + serial + ` ] && echo /dev/${b##*/}; done)`
}

// migrationRunner is a runner whose console's heartbeats are counted.
type migrationRunner struct {
	podIP string // its network namespace's pod IP, with the masquerade network
	r     *runnerProc
	mu    sync.Mutex
	hb    []int
	hbAt  []time.Time   // when each heartbeat was read
	seen  chan struct{} // gets a value at each heartbeat
}

var heartbeatLine = regexp.MustCompile(`VIRTPOD-HB (\d+)$`)

func startMigrationRunner(t testing.TB, netns string, args []string) *migrationRunner {
	m := &migrationRunner{seen: make(chan struct{}, 1)}
	m.r = startRunner(t, netns, args...)
	on := func(line string) {
		if g := heartbeatLine.FindStringSubmatch(strings.TrimSpace(line)); g != nil && strings.HasPrefix(strings.TrimSpace(line), "VIRTPOD-HB") {
			n, _ := strconv.Atoi(g[1])
			m.mu.Lock()
			m.hb, m.hbAt = append(m.hb, n), append(m.hbAt, time.Now())
			m.mu.Unlock()
			select {
			case m.seen <- struct{}{}:
			default:
			}
		}
	}
	m.r.onLine.Store(&on)
	return m
}

func (m *migrationRunner) lastHeartbeat() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.hb) == 0 {
		return 0
	}
	return m.hb[len(m.hb)-1]
}

// waitHeartbeat returns the first heartbeat this runner's console showed, waiting for one.
func (m *migrationRunner) waitHeartbeat(t testing.TB) int {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
		m.mu.Lock()
		n := len(m.hb)
		first := 0
		if n > 0 {
			first = m.hb[0]
		}
		m.mu.Unlock()
		if n > 0 {
			return first
		}
		select {
		case <-m.seen:
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("no heartbeat on the console:\n%s", tail(m.r.stdout.String(), 10))
	return 0
}

// heartbeatGoesOn waits for ten more heartbeats, each following the last: the guest runs here,
// without restarting.
func (m *migrationRunner) heartbeatGoesOn(t testing.TB) {
	t.Helper()
	start := m.lastHeartbeat()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
		m.mu.Lock()
		hb := append([]int(nil), m.hb...)
		m.mu.Unlock()
		for i := 1; i < len(hb); i++ {
			// Another console line may swallow one (the guest's shell writes too), never more,
			// and the count never starts again.
			if (hb[i] <= hb[i-1] || hb[i] > hb[i-1]+3) && hb[i-1] >= start {
				t.Fatalf("heartbeat %d followed by %d", hb[i-1], hb[i])
			}
		}
		if len(hb) > 0 && hb[len(hb)-1] >= start+10 {
			return
		}
		select {
		case <-m.seen:
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("the heartbeat stopped at %d (was %d):\n%s", m.lastHeartbeat(), start, tail(m.r.stdout.String(), 10))
}

func (m *migrationRunner) status(t testing.TB) runner.Status {
	t.Helper()
	code, body := runnerGet(t, m.r.stateDir, "/status")
	var st runner.Status
	if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
		t.Fatalf("/status: %d %q %v", code, body, err)
	}
	return st
}

// wantState waits briefly for the runner's /status to report state.
func (m *migrationRunner) wantState(t testing.TB, state string) {
	t.Helper()
	var st runner.Status
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		select {
		case <-m.r.exited:
			t.Fatalf("runner exited (%d) waiting for state %s: %s", m.r.exitCode, state, readFile(m.r.termLog))
		default:
		}
		if _, err := os.Stat(filepath.Join(m.r.stateDir, "runner.sock")); err != nil {
			continue
		}
		if st = m.status(t); st.State == state {
			return
		}
	}
	t.Fatalf("runner state %+v, want %s", st, state)
}

func (m *migrationRunner) waitRunning(t testing.TB) { t.Helper(); m.wantState(t, runner.StateRunning) }

// runnerGet GETs path from the runner's HTTP endpoint (the default unix socket).
func runnerGet(t testing.TB, stateDir, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(stateDir, "runner.sock"))
	}}}
	resp, err := c.Get("http://runner" + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

type migClient struct{ c *http.Client }

func migrationClient(sock string) migClient { return migClient{controlClient(sock).c} }

// MigrationRequestBody is a PUT body with a bandwidth and downtime limit (0: the defaults).
func MigrationRequestBody(bandwidthMiBps, downtimeMs int64) string {
	b, _ := json.Marshal(runner.MigrationRequest{BandwidthMiBps: bandwidthMiBps, DowntimeLimitMs: downtimeMs, AutoConverge: true})
	return string(b)
}

func (c migClient) do(t testing.TB, method, body string) (int, runner.MigrationStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, "http://runner"+controlapi.MigrationPath, rd)
	resp, err := c.c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, controlapi.MigrationPath, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var s runner.MigrationStatus
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s %s: %d %q: %v", method, controlapi.MigrationPath, resp.StatusCode, b, err)
	}
	return resp.StatusCode, s
}

func (c migClient) put(t testing.TB, body string, want int) runner.MigrationStatus {
	t.Helper()
	code, s := c.do(t, http.MethodPut, body)
	if code != want {
		t.Fatalf("PUT %s: %d %+v, want %d", body, code, s, want)
	}
	return s
}

// waitMigration polls GET, as the node agent does, until done accepts the status.
func waitMigration(t testing.TB, c migClient, done func(runner.MigrationStatus) bool) runner.MigrationStatus {
	t.Helper()
	var s runner.MigrationStatus
	for end := time.Now().Add(3 * time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		var code int
		if code, s = c.do(t, http.MethodGet, ""); code == http.StatusOK && done(s) {
			return s
		}
	}
	t.Fatalf("migration status %+v after 3 minutes", s)
	return s
}

// newMigrationRelay plays both node agents: it listens on the source's migrate-out.sock and
// nbd-out.sock and relays QEMU's connections to the target's migrate-in.sock (once) and
// nbd-in.sock (one connection per mirrored disk), copying both ways until either end closes.
func newMigrationRelay(t testing.TB, src, dst *runnerProc) {
	t.Helper()
	srcDir, dstDir := filepath.Dir(src.control), filepath.Dir(dst.control)
	relaySocket(t, srcDir, controlapi.MigrateOutSocket, filepath.Join(dstDir, controlapi.MigrateInSocket), 1)
	relaySocket(t, srcDir, controlapi.NBDOutSocket, filepath.Join(dstDir, controlapi.NBDInSocket), 0)
}

// relaySocket listens on name in the control directory dir, as the agent makes it (the runner's
// user's, whose QEMU connects), and relays up to max connections (0: any number) to in.
func relaySocket(t testing.TB, dir, name, in string, max int) {
	l, err := podcontrol.Control{Root: filepath.Dir(dir), Device: filepath.Base(dir)}.Listen(name)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	closeAll := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	}
	t.Cleanup(func() { _ = l.Close(); closeAll() })
	go func() {
		for n := 1; ; n++ {
			a, err := l.Accept()
			if max > 0 && n == max {
				_ = l.Close()
			}
			if err != nil {
				return
			}
			b, err := net.Dial("unix", in)
			mu.Lock()
			conns = append(conns, a)
			if err == nil {
				conns = append(conns, b)
			}
			mu.Unlock()
			if err != nil {
				_ = a.Close()
				continue
			}
			go func() {
				go func() { _, _ = io.Copy(a, b); _ = a.Close(); _ = b.Close() }()
				_, _ = io.Copy(b, a)
				_ = a.Close()
				_ = b.Close()
			}()
		}
	}()
}

// writerSectors is the last WRITER-SECTORS-<n> count on a console.
func writerSectors(console string) int {
	m := regexp.MustCompile(`WRITER-SECTORS-(\d+)`).FindAllStringSubmatch(console, -1)
	if len(m) == 0 {
		return -1
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// consoleRun types cmd on the guest's serial console and waits for it to finish; each of want
// must be in what it printed (heartbeat lines may come between them). The end marker is computed by the shell, so the echo of the
// typed line cannot match it.
func consoleRun(t *testing.T, r *runnerProc, cmd string, want ...string) {
	t.Helper()
	con := attachLocalConsole(t, runnerBinary(t), r.stateDir)
	n := time.Now().UnixNano() % 100000
	if _, err := fmt.Fprintf(con.in, "%s; echo DONE-$((%d+1))\n", cmd, n); err != nil {
		t.Fatal(err)
	}
	end := fmt.Sprintf("DONE-%d", n+1)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		out := con.out.String()
		if i := strings.Index(out, end); i >= 0 {
			for _, w := range want {
				if !strings.Contains(out[:i], w) {
					t.Fatalf("%q printed %q, want %q", cmd, out[:i], w)
				}
			}
			return
		}
	}
	t.Fatalf("%q did not finish on the console:\n%s", cmd, tail(con.out.String(), 10))
}
