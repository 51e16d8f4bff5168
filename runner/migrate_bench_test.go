package runner_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtpod/virtpod/pkg/controlapi"
)

// BenchmarkMigrate moves a TCG guest (256Mi, then 1Gi) from runner to runner three times, each
// hop to a new --incoming runner through a relay in the node agents' place, at the default
// bandwidth (256 MiB/s) and downtime limit (QEMU's 300 ms), auto-converge on. Before the hops
// the guest fills half its memory with non-zero data in a tmpfs, so the stream carries that much
// RAM, not only the zero pages of an idle guest. Per hop: QEMU's total time and downtime, the
// wall time from the PUT to the target runner reporting running, and the guest's own gap: the
// time between the last heartbeat (every 50 ms) read on the source's console and the first on
// the target's. It reports the medians; run it with -benchtime=1x (make bench-migrate).
func BenchmarkMigrate(b *testing.B) {
	guest := needResizeGuest(b)
	for _, mib := range []int{256, 1024} {
		b.Run(fmt.Sprintf("%dMi", mib), func(b *testing.B) { benchMigrate(b, guest, mib) })
	}
}

func benchMigrate(b *testing.B, guest string, mib int) {
	// VIRTPOD_BENCH_MIGRATE_MIBPS names the migration's bandwidth (0, the default: none named).
	bw, _ := strconv.ParseInt(os.Getenv("VIRTPOD_BENCH_MIGRATE_MIBPS"), 10, 64)
	mt := newMigrationTest(b, guest, "vm-bench-migrate", "none", mib)
	cur := mt.boot(b)
	fillGuestMemory(b, cur.r, mib/2)
	var total, downtime, wall, gap []time.Duration
	b.ResetTimer()
	for hop := 0; hop < 3; hop++ {
		next := mt.target(b)
		newMigrationRelay(b, cur.r, next.r)
		// The relay's sockets are the runner's user's, as a node agent makes them; this runner
		// is root (no network namespace, no capability): they are handed to root.
		for _, name := range []string{controlapi.MigrateOutSocket, controlapi.NBDOutSocket} {
			if err := os.Chown(filepath.Join(filepath.Dir(cur.r.control), name), 0, 0); err != nil {
				b.Fatal(err)
			}
		}
		ctl := migrationClient(cur.r.control)
		start := time.Now()
		ctl.put(b, MigrationRequestBody(bw, 0), http.StatusAccepted)
		s := waitMigration(b, ctl, func(s controlapi.MigrationStatus) bool { return s.Terminal() })
		if s.State != controlapi.MigrationCompleted {
			b.Fatalf("hop %d: %+v", hop, s)
		}
		next.waitRunning(b)
		wall = append(wall, time.Since(start))
		next.waitHeartbeat(b)
		cur.mu.Lock()
		lastAt := cur.hbAt[len(cur.hbAt)-1]
		cur.mu.Unlock()
		next.mu.Lock()
		firstAt := next.hbAt[0]
		next.mu.Unlock()
		total = append(total, time.Duration(s.TotalTimeMs)*time.Millisecond)
		downtime = append(downtime, time.Duration(s.DowntimeMs)*time.Millisecond)
		gap = append(gap, firstAt.Sub(lastAt))
		b.Logf("%dMi hop %d: QEMU total %d ms, downtime %d ms, %d MiB sent; PUT to target running %v; heartbeat gap %v",
			mib, hop+1, s.TotalTimeMs, s.DowntimeMs, s.TransferredBytes>>20, wall[hop].Round(time.Millisecond), gap[hop].Round(time.Millisecond))
		cur.r.cmd.Process.Signal(syscall.SIGTERM)
		<-cur.r.exited
		cur = next
	}
	b.StopTimer()
	median := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	b.ReportMetric(median(total), "total-ms")
	b.ReportMetric(median(downtime), "downtime-ms")
	b.ReportMetric(median(wall), "put-to-running-ms")
	b.ReportMetric(median(gap), "heartbeat-gap-ms")
	cur.r.cmd.Process.Signal(syscall.SIGTERM)
	<-cur.r.exited
}

// fillGuestMemory writes mib MiB of non-zero data into a tmpfs in the guest: one random MiB,
// copied (cat is a kernel copy; a shell loop writing bytes takes minutes under TCG).
func fillGuestMemory(b *testing.B, r *runnerProc, mib int) {
	b.Helper()
	con := attachLocalConsole(b, runnerBinary(b), r.stateDir)
	if _, err := fmt.Fprintf(con.in, "mkdir -p /fill; mount -t tmpfs -o size=95%% tmpfs /fill; head -c 1048576 /dev/urandom >/fill/a; "+
		"i=1; while [ $i -lt %d ]; do cat /fill/a; i=$((i+1)); done >/fill/data; echo FILLED-$((%d+1))\n", mib, mib); err != nil {
		b.Fatal(err)
	}
	want := fmt.Sprintf("FILLED-%d", mib+1)
	for end := time.Now().Add(3 * time.Minute); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if strings.Contains(con.out.String(), want) {
			return
		}
	}
	b.Fatalf("the guest did not fill %d MiB:\n%s", mib, tail(con.out.String(), 10))
}
