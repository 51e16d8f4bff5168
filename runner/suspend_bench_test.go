package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner"
)

// BenchmarkSuspend suspends a TCG guest (256Mi, then 1Gi) to a file and resumes it in a new
// runner, three times each, after the guest filled half its memory with non-zero data in a
// tmpfs. Per cycle: the PUT /v1/suspend's time (pause, state written and synced), the state's
// size, and for the resume: QEMU loading the state (the runner's log, from the stream's start to
// QEMU's "completed"), the runner's start to the guest running again (its status), and to the
// guest's first heartbeat. Medians; run it with -benchtime=1x (make bench-suspend).
func BenchmarkSuspend(b *testing.B) {
	guest := needResizeGuest(b)
	for _, mib := range []int{256, 1024} {
		b.Run(fmt.Sprintf("%dMi", mib), func(b *testing.B) { benchSuspend(b, guest, mib) })
	}
}

func benchSuspend(b *testing.B, guest string, mib int) {
	args := baseArgs(b, guest, "vm-bench-suspend")
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--kernel-args="):
			args[i] = "--kernel-args=rw virtpod.heartbeat"
		case strings.HasPrefix(a, "--memory-mib="):
			args[i] = "--memory-mib=" + strconv.Itoa(mib)
		}
	}
	state := filepath.Join(b.TempDir(), "guest.state")
	args = append(args, "--network=none", "--root-volume=kind=file,path="+b.TempDir(), "--suspend-to="+state)
	cur := startMigrationRunner(b, "", args)
	select {
	case <-cur.r.markerSeen:
	case <-time.After(bootTimeout):
		b.Fatalf("no %s within %v", marker, bootTimeout)
	}
	cur.heartbeatGoesOn(b)
	fillGuestMemory(b, cur.r, mib/2)
	var save, load, running, beat []time.Duration
	var size int64
	b.ResetTimer()
	for cycle := 0; cycle < 3; cycle++ {
		start := time.Now()
		st, err := controlOf(cur.r).Suspend(context.Background())
		if err != nil || st.State != controlapi.SuspendSaved {
			b.Fatalf("cycle %d: suspend %+v, %v", cycle, st, err)
		}
		save = append(save, time.Since(start))
		size = st.Bytes
		select {
		case <-cur.r.exited:
		case <-time.After(time.Minute):
			b.Fatalf("cycle %d: the runner did not end after the suspend", cycle)
		}
		if cur.r.exitCode != runner.ExitOK {
			b.Fatalf("cycle %d: after the suspend: exit %d %q", cycle, cur.r.exitCode, readFile(cur.r.termLog))
		}
		start = time.Now()
		next := startMigrationRunner(b, "", append(slices.Clone(args), "--resume-from="+state))
		next.waitRunning(b)
		running = append(running, time.Since(start))
		next.waitHeartbeat(b)
		next.mu.Lock()
		beat = append(beat, next.hbAt[0].Sub(start))
		next.mu.Unlock()
		load = append(load, logGap(b, next.r.stderr.String(), "resuming the guest from its saved state", "the guest's saved state is loaded and removed; resuming it"))
		b.Logf("%dMi cycle %d: suspend %v (%d MiB of state); resume: QEMU loaded it in %v, runner start to running %v, to the first heartbeat %v",
			mib, cycle+1, save[cycle].Round(time.Millisecond), size>>20, load[cycle].Round(time.Millisecond), running[cycle].Round(time.Millisecond), beat[cycle].Round(time.Millisecond))
		cur = next
	}
	b.StopTimer()
	median := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	b.ReportMetric(median(save), "suspend-ms")
	b.ReportMetric(float64(size>>20), "state-MiB")
	b.ReportMetric(median(load), "load-ms")
	b.ReportMetric(median(running), "start-to-running-ms")
	b.ReportMetric(median(beat), "start-to-heartbeat-ms")
	cur.r.cmd.Process.Signal(syscall.SIGTERM)
	<-cur.r.exited
}

// logGap is the time between the runner's log lines with messages from and to.
func logGap(b *testing.B, log, from, to string) time.Duration {
	b.Helper()
	at := func(msg string) float64 {
		for _, line := range strings.Split(log, "\n") {
			var l struct {
				TS  float64 `json:"ts"`
				Msg string  `json:"msg"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == msg {
				return l.TS
			}
		}
		b.Fatalf("no log line %q", msg)
		return 0
	}
	return time.Duration((at(to) - at(from)) * float64(time.Second))
}
