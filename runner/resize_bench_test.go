package runner_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virtpod/virtpod/tests/loopback"
)

// BenchmarkResize boots one guest (1 of 4 vCPUs, 256Mi of 1Gi, TCG) that prints a heartbeat line
// every 50 ms, and times each resize step from the PUT to the guest's own report of the new size
// (its hotplug handler prints it once the vCPU is online or the memory blocks are): vCPUs added
// one by one to 4 and removed one by one to 1 (under tcg none is added after a removal), then
// memory grown 256Mi -> 768Mi and shrunk back, several times. The guest's downtime is the longest
// gap between heartbeats during the steps, against the longest gap while idle. Run it with
// -benchtime=1x (make bench-resize): one boot gives every step.
func BenchmarkResize(b *testing.B) {
	guest := needResizeGuest(b)
	args := baseArgs(b, guest, "vm-bench-resize")
	for i, a := range args {
		if strings.HasPrefix(a, "--kernel-args=") {
			args[i] = "--kernel-args=rw virtpod.heartbeat"
		}
	}
	r := startRunner(b, "", append(args, "--max-cpus=4", "--max-memory-mib=1024", "--network=none", "--http-addr="+loopback.FreeAddr(b))...)
	var mu sync.Mutex
	var lastHB time.Time
	var maxGap time.Duration
	var sizes []string // guest size reports since the last reset
	var seen []time.Time
	on := func(line string) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(line, "VIRTPOD-HB ") {
			if !lastHB.IsZero() && now.Sub(lastHB) > maxGap {
				maxGap = now.Sub(lastHB)
			}
			lastHB = now
		}
		if i := strings.Index(line, "VIRTPOD-GUEST-SIZE "); i >= 0 {
			sizes, seen = append(sizes, line[i:]), append(seen, now)
		}
	}
	r.onLine.Store(&on)
	waitMarker(b, r)
	ctl := controlClient(r.control)

	gap := func(reset bool) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		g := maxGap
		if reset {
			maxGap, sizes, seen = 0, nil, nil
		}
		return g
	}
	time.Sleep(3 * time.Second)
	idleGap := gap(true)

	// step PUTs a size and waits for the guest's report of it; it returns both latencies.
	step := func(cpus int32, memory, online string, mib int) (put, guest time.Duration) {
		gap(true)
		start := time.Now()
		ctl.put(b, cpus, memory, http.StatusOK)
		put = time.Since(start)
		want := fmt.Sprintf("cpus=%d online=%s memory=%dMi ", cpus, online, mib)
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			i := slices.IndexFunc(sizes, func(s string) bool { return strings.Contains(s, want) })
			var at time.Time
			if i >= 0 {
				at = seen[i]
			}
			mu.Unlock()
			if i >= 0 {
				return put, at.Sub(start)
			}
		}
		b.Fatalf("the guest never reported %q", want)
		return
	}
	var add, remove, grow, shrink, puts []time.Duration
	var busyGap time.Duration
	record := func(into *[]time.Duration, put, guest time.Duration) {
		*into = append(*into, guest)
		puts = append(puts, put)
		busyGap = max(busyGap, gap(false))
	}
	b.ResetTimer()
	for n := int32(2); n <= 4; n++ {
		p, g := step(n, "256Mi", fmt.Sprintf("0-%d", n-1), 256)
		record(&add, p, g)
	}
	for n := int32(3); n >= 1; n-- {
		online := "0"
		if n > 1 {
			online = fmt.Sprintf("0-%d", n-1)
		}
		p, g := step(n, "256Mi", online, 256)
		record(&remove, p, g)
	}
	for i := 0; i < 5; i++ {
		p, g := step(1, "768Mi", "0", 768)
		record(&grow, p, g)
		p, g = step(1, "256Mi", "0", 256)
		record(&shrink, p, g)
	}
	b.StopTimer()
	ms := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	b.ReportMetric(ms(add), "cpu-add-ms")
	b.ReportMetric(ms(remove), "cpu-remove-ms")
	b.ReportMetric(ms(grow), "mem-grow-512Mi-ms")
	b.ReportMetric(ms(shrink), "mem-shrink-512Mi-ms")
	b.ReportMetric(ms(puts), "put-ms")
	b.ReportMetric(float64(busyGap.Microseconds())/1000, "heartbeat-gap-max-ms")
	b.ReportMetric(float64(idleGap.Microseconds())/1000, "heartbeat-gap-idle-ms")
	b.Logf("cpu add %v, remove %v, memory grow %v, shrink %v; heartbeat gap %v resizing, %v idle", add, remove, grow, shrink, busyGap, idleGap)
}

func waitMarker(b *testing.B, r *runnerProc) {
	select {
	case <-r.markerSeen:
	case <-r.exited:
		b.Fatalf("runner exited before the marker: %s", readFile(r.termLog))
	case <-time.After(bootTimeout):
		b.Fatalf("no marker within %v", bootTimeout)
	}
}
