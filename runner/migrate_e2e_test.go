package runner_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtpod/virtpod/runner/status"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/disk/volumedisk"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner"
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
	// Each runner in an IPv6-only network namespace of its own, as in its own pod: the guest
	// keeps fd10:0:2::2 behind a different pod IP after each move (IPv4 masquerade moves between
	// the local cluster's nodes in tests/e2e).
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

	if network == "masquerade" {
		// The guest's address from the source's DHCPv6 before the move: the fixture asks in the
		// background while it boots, and a loaded CI run once moved it mid-exchange (it took
		// the address at the target, from the target's runner).
		waitOutput(t, src.r, "VIRTPOD-GUEST-IPV6 fd10:0:2::2 ", 90*time.Second)
	}
	t.Run("move", func(t *testing.T) {
		// The source booted the PVH vmlinux; the target's QEMU is given the same kernel as the
		// fixture's bzImage (as a runner whose kernel the node agent did not unpack): the move
		// does not depend on how QEMU loaded the kernel, and the next hops, given the vmlinux
		// again, move it back.
		dst := mt.targetBooting(t, filepath.Join(guest, "boot", "vmlinuz"))
		if log := dst.r.stderr.String(); !strings.Contains(log, `"notUnpacked":"this node agent unpacks no kernels"`) {
			t.Fatalf("the target's QEMU does not load the bzImage itself:\n%s", tail(log, 10))
		}
		dstCtl := migrationClient(dst.r.control)
		newMigrationRelay(t, src.r, dst.r)
		// The guest writes sector after sector of its data disk through the move (a few a second
		// under TCG): the mirror must carry the ones written at the source while it copies.
		consoleRun(t, src.r, "(i=1; while [ $i -le 2000 ]; do echo w$i | dd of="+guestDisk("data")+" bs=512 seek=$i count=1 conv=fsync 2>/dev/null; i=$((i+1)); sleep 0.05; done) & echo $! >/writer; sleep 1")
		srcCtl.put(t, MigrationRequestBody(0, 0), http.StatusAccepted)
		s := waitMigration(t, srcCtl, func(s controlapi.MigrationStatus) bool { return s.Terminal() })
		if s.State != controlapi.MigrationCompleted || s.TransferredBytes <= 0 || s.TotalBytes <= 0 || s.DowntimeMs <= 0 || s.TotalTimeMs <= 0 {
			t.Fatalf("source GET after the move: %+v", s)
		}
		t.Logf("moved: %+v", s)
		dst.waitRunning(t)
		if g := waitMigration(t, dstCtl, func(s controlapi.MigrationStatus) bool { return s.Terminal() }); g.State != controlapi.MigrationCompleted || g.Role != controlapi.RoleTarget {
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
			// The guest kept its address (fd10:0:2::2, from the source's DHCPv6) and answers
			// at the new pod's IP, from outside that pod.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			body, err := httpGet(ctx, "http://["+dst.podIP+"]/")
			cancel()
			// No ip= names the host in an IPv6-only pod: the fixture's page says "(none)".
			if err != nil || !strings.Contains(body, "virtpod guest ") {
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

		src.wantState(t, status.StateMigrated)
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
		dst.wantState(t, status.StateRunning)

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
			if s := waitMigration(t, prevCtl, func(s controlapi.MigrationStatus) bool { return s.Terminal() }); s.State != controlapi.MigrationCompleted || s.Role != controlapi.RoleSource || len(s.Disks) != 3 {
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
			if code, body := runnerGet(t, dst.r.stateDir, "/startedz"); code != http.StatusServiceUnavailable || !strings.Contains(body, status.StateIncoming) {
				t.Fatalf("target /startedz while waiting: %d %q", code, body)
			}
			newMigrationRelay(t, src.r, dst.r)
			srcCtl.put(t, MigrationRequestBody(1, 0), http.StatusAccepted)
			// Cancelled while the disks are still being copied, before any memory is sent.
			mirroring := waitMigration(t, srcCtl, func(s controlapi.MigrationStatus) bool { return s.TransferredBytes > 0 })
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
			// QEMU's listening sockets went with it (make soak-node found them left behind).
			for _, name := range []string{controlapi.MigrateInSocket, controlapi.NBDInSocket} {
				if _, err := os.Stat(filepath.Join(filepath.Dir(dst.r.control), name)); !os.IsNotExist(err) {
					t.Errorf("%s in the stopped target's control directory: %v", name, err)
				}
			}
			// The claims it made for the mirrors are partial, and say so to any later runner.
			if err := volumedisk.CheckComplete(dst.rootClaim(t)); err == nil || !strings.Contains(err.Error(), "never completed here") {
				t.Errorf("the cancelled target's root claim: %v; want it refused as partial", err)
			}
		})

		t.Run("target killed mid-stream", func(t *testing.T) {
			dst := target(t)
			newMigrationRelay(t, src.r, dst.r)
			// 4 MiB/s: the stream is still young when the target dies (its memory alone takes
			// half a minute), and a mirror throttled at 1 MiB/s would sleep out its last 16 MiB
			// chunk (16 s) before it saw the error. Active, not only bytes: until the new send
			// starts, the status still shows the cancelled one's.
			srcCtl.put(t, MigrationRequestBody(4, 0), http.StatusAccepted)
			waitMigration(t, srcCtl, func(s controlapi.MigrationStatus) bool {
				return s.State == controlapi.MigrationActive && s.TransferredBytes > 0
			})
			dst.r.signal(t, syscall.SIGKILL) // QEMU dies with its runner (Pdeathsig)
			s := waitMigration(t, srcCtl, func(s controlapi.MigrationStatus) bool { return s.Terminal() })
			if s.State != controlapi.MigrationFailed || s.Error == "" {
				t.Fatalf("source after its target died: %+v, want failed with QEMU's reason", s)
			}
			t.Logf("source's status: %+v", s)
			src.heartbeatGoesOn(t)
			src.wantState(t, status.StateRunning)
		})

		t.Run("resume after completed", func(t *testing.T) {
			dst := target(t)
			newMigrationRelay(t, src.r, dst.r)
			srcCtl.put(t, MigrationRequestBody(0, 0), http.StatusAccepted)
			s := waitMigration(t, srcCtl, func(s controlapi.MigrationStatus) bool { return s.Terminal() })
			if s.State != controlapi.MigrationCompleted {
				t.Fatalf("migration ended %+v", s)
			}
			src.wantState(t, status.StateMigrated)
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
			reap(t, hypervisors, 10*time.Second)
			waitGone(t, hypervisors, time.Minute)
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
			src.wantState(t, status.StateRunning)
		})
		src.r.signal(t, syscall.SIGTERM)
		if code, msg := src.r.waitExit(t, 30*time.Second); code != runner.ExitOK || msg != "stopped on SIGTERM: guest powered off" {
			t.Fatalf("last runner after SIGTERM: exit %d %q", code, msg)
		}
	})
}
