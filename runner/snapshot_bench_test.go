package runner_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/tests/loopback"
)

// snapshotDiskMiB is the benchmark's data disk: random data, so no copy can skip a block.
const snapshotDiskMiB = 1024

// BenchmarkSnapshot (make bench-snapshot) backs up the test guest's 1 GiB data disk (a claim's
// disk file filled with random data on the host before the boot) through PUT /v1/backup onto a
// target qemu-nbd serves, as the node agent would, under TCG: a full backup with the file
// systems frozen, an incremental one with nothing changed, and an incremental one after the
// guest wrote 8 MiB, each onto the same target, which must then equal the disk. It reports each
// one's bytes copied and seconds (the PUT until its answer: the copy, the targets flushed and
// disconnected).
func BenchmarkSnapshot(b *testing.B) {
	guest := needGuestHost(b)
	need(b, haveBinary("qemu-nbd"), "needs qemu-nbd (qemu-utils)")
	claim := b.TempDir()
	disk := filepath.Join(claim, "disk.img")
	fillRandom(b, disk, snapshotDiskMiB<<20)
	args := append(baseArgs(b, guest, "vm-snapshot"), "--network=none", "--http-addr="+loopback.FreeAddr(b),
		fmt.Sprintf("--disk=name=data,kind=file,path=%s,size-mib=%d", claim, snapshotDiskMiB))
	r := startRunner(b, "", args...)
	waitMarker(b, r)
	src := backupSource{"disk-data", disk, snapshotDiskMiB << 20}
	target := filepath.Join(b.TempDir(), "data.img")
	var full, unchanged, changed snapshotRun
	n := 0
	for b.Loop() {
		n++
		_ = os.Remove(target)
		full = timedBackup(b, r, src, target, fmt.Sprintf("full-%d", n), "", true)
		unchanged = timedBackup(b, r, src, target, fmt.Sprintf("unchanged-%d", n), fmt.Sprintf("full-%d", n), true)
		guestWrite(b, r, "data", 512, 8)
		changed = timedBackup(b, r, src, target, fmt.Sprintf("changed-%d", n), fmt.Sprintf("unchanged-%d", n), true)
	}
	sameBytes(b, target, disk)
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	<-r.exited
	for _, m := range []struct {
		name string
		run  snapshotRun
	}{{"full", full}, {"incr-unchanged", unchanged}, {"incr-8MiB", changed}} {
		b.ReportMetric(float64(m.run.bytes), m.name+"-bytes")
		b.ReportMetric(m.run.took.Seconds(), m.name+"-s")
	}
	b.Logf("1 GiB disk: full %d bytes in %v, unchanged %d in %v, after 8 MiB written %d in %v",
		full.bytes, full.took, unchanged.bytes, unchanged.took, changed.bytes, changed.took)
}

// snapshotRun is one backup's bytes copied and time.
type snapshotRun struct {
	bytes int64
	took  time.Duration
}

// timedBackup backs src up onto target (since the bitmap since, or whole) under a new bitmap.
func timedBackup(b *testing.B, r *runnerProc, src backupSource, target, bitmap, since string, freeze bool) snapshotRun {
	b.Helper()
	d, done := serveTarget(b, r, src, target, since, "none")
	start := time.Now()
	code, st := putBackup(b, r, controlapi.BackupRequest{Bitmap: bitmap, Freeze: freeze, Drives: []controlapi.BackupDrive{d}})
	took := time.Since(start)
	disconnected(b, []<-chan struct{}{done})
	if code != http.StatusOK || len(st.Drives) != 1 {
		b.Fatalf("backup %s since %q: %d %+v", bitmap, since, code, st)
	}
	return snapshotRun{st.Drives[0].Copied, took}
}

// fillRandom writes size bytes of random data to path.
func fillRandom(b *testing.B, path string, size int64) {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rng := rand.NewChaCha8([32]byte{7})
	buf := make([]byte, 4<<20)
	for written := int64(0); written < size; written += int64(len(buf)) {
		_, _ = rng.Read(buf)
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
}
