package runner_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/tests/loopback"
)

// hotplugCycles is how many attach and detach pairs BenchmarkHotplug times.
const hotplugCycles = 5

// BenchmarkHotplug (make bench-hotplug) attaches a 64 MiB disk qemu-nbd serves to the running
// test guest under TCG and detaches it again, hotplugCycles times, as the node agent would
// (PUT /v1/hotplug): attach is the PUT until the guest's report of the disk (its uevent
// handler's VIRTPOD-GUEST-DISK-ADDED line), attach-put the PUT alone; detach is the PUT until
// its answer, which waits for QEMU's DEVICE_DELETED (the guest released the disk). Medians and
// the slowest of each.
func BenchmarkHotplug(b *testing.B) {
	guest := needGuestHost(b)
	need(b, haveBinary("qemu-nbd"), "needs qemu-nbd (qemu-utils)")
	r := startRunner(b, "", append(baseArgs(b, guest, "vm-hotplug"), "--network=none", "--http-addr="+loopback.FreeAddr(b), "--hotplug-slots=4")...)
	var mu sync.Mutex
	var added []time.Time
	on := func(line string) {
		if strings.Contains(line, "VIRTPOD-GUEST-DISK-ADDED serial=hot ") {
			mu.Lock()
			added = append(added, time.Now())
			mu.Unlock()
		}
	}
	r.onLine.Store(&on)
	waitMarker(b, r)
	file := filepath.Join(b.TempDir(), "hot.img")
	if err := os.WriteFile(file, nil, 0o600); err != nil || os.Truncate(file, 64<<20) != nil {
		b.Fatal("making the disk file: ", err)
	}
	serveHot(b, r, "hot", file)
	c := controlOf(r)
	hot := controlapi.HotplugDisk{Name: "hot", Slot: 1, Socket: controlapi.HotplugSocket("hot")}
	var attach, attachPut, detach []time.Duration
	for b.Loop() {
		for range hotplugCycles {
			start := time.Now()
			putHotplug(b, c, "hot@1", hot)
			attachPut = append(attachPut, time.Since(start))
			seen := len(attach) + 1
			for end := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
				mu.Lock()
				n := len(added)
				var at time.Time
				if n >= seen {
					at = added[seen-1]
				}
				mu.Unlock()
				if n >= seen {
					attach = append(attach, at.Sub(start))
					break
				}
				if time.Now().After(end) {
					b.Fatalf("the guest did not report the disk within a minute of its attach:\n%s", tail(r.stdout.String(), 10))
				}
			}
			start = time.Now()
			putHotplug(b, c, "")
			detach = append(detach, time.Since(start))
		}
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	<-r.exited
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"attach", attach}, {"attach-put", attachPut}, {"detach", detach}} {
		slices.Sort(m.d)
		b.ReportMetric(m.d[len(m.d)/2].Seconds(), m.name+"-s")
		b.ReportMetric(m.d[len(m.d)-1].Seconds(), m.name+"-max-s")
	}
	b.Logf("%d cycles under TCG: attach (PUT to the guest's report) %v, of which the PUT %v; detach (PUT to DEVICE_DELETED) %v",
		len(attach), attach, attachPut, detach)
}
