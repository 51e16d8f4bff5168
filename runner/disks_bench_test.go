package runner_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/tests/loopback"
)

// The guest's disk benchmark (virtpod.disk-bench in the guest fixture): 128 MiB sequential, 256
// random 4 KiB operations, all O_DIRECT, writes synced.
const (
	benchSeqMiB = 128
	benchOps    = 256
	benchBlocks = 8192 // 4 KiB blocks the random offsets fall in: the first 32 MiB
)

var benchLine = regexp.MustCompile(`VIRTPOD-GUEST-DISK-BENCH serial=bench t=([0-9.]+),([0-9.]+),([0-9.]+),([0-9.]+),([0-9.]+)`)

// diskRates are MiB/s for the sequential pair and operations/s for the random pair.
type diskRates struct{ seqWrite, seqRead, randWrite, randRead float64 }

// BenchmarkDisk (make bench-disk) runs the same operations on a Filesystem claim's disk file from
// inside the guest (QEMU, cache=none, every write flushed) and on the same file from the host,
// and reports both and their ratio. Under TCG the guest's figures include the emulation of its
// own kernel and of a dd process per random operation: they are context, not a product number.
func BenchmarkDisk(b *testing.B) {
	guest := needGuestHost(b)
	claim := b.TempDir()
	var g diskRates
	for range b.N {
		r := startRunnerB(b, guest, claim)
		select {
		case <-r.markerSeen:
		case <-time.After(5 * time.Minute):
			b.Fatalf("no guest marker:\n%s", tail(r.stdout.String(), 20))
		}
		m := benchLine.FindStringSubmatch(r.stdout.String())
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		<-r.exited
		if m == nil {
			b.Fatalf("no benchmark line on the console:\n%s", tail(r.stdout.String(), 20))
		}
		var t [5]float64
		for i := range t {
			t[i], _ = strconv.ParseFloat(m[i+1], 64)
		}
		g = diskRates{benchSeqMiB / (t[1] - t[0]), benchSeqMiB / (t[2] - t[1]), benchOps / (t[3] - t[2]), benchOps / (t[4] - t[3])}
	}
	h := hostRates(b, filepath.Join(claim, "disk.img"))
	for _, m := range []struct {
		name        string
		guest, host float64
	}{
		{"seq-write-MiB/s", g.seqWrite, h.seqWrite}, {"seq-read-MiB/s", g.seqRead, h.seqRead},
		{"rand-write-IOPS", g.randWrite, h.randWrite}, {"rand-read-IOPS", g.randRead, h.randRead},
	} {
		b.ReportMetric(m.guest, "guest-"+m.name)
		b.ReportMetric(m.host, "host-"+m.name)
		b.ReportMetric(m.guest/m.host, "ratio-"+strings.SplitN(m.name, "-", 3)[0]+"-"+strings.SplitN(m.name, "-", 3)[1])
	}
}

// startRunnerB boots the fixture with the claim's disk as "bench" and the benchmark asked for.
func startRunnerB(b *testing.B, guest, claim string) *runnerProc {
	args := baseArgs(b, guest, "vm-bench")
	for i, a := range args {
		if strings.HasPrefix(a, "--kernel-args=") {
			args[i] = "--kernel-args=rw virtpod.disk-bench=bench"
		}
	}
	args = append(args, "--network=none", "--http-addr="+loopback.FreeAddr(b), "--disk=name=bench,kind=file,path="+claim+",size-mib=160")
	return startRunner(b, "", args...)
}

// hostRates runs the guest's operations on file from the host: O_DIRECT, each write synced.
func hostRates(b *testing.B, file string) diskRates {
	f, err := os.OpenFile(file, os.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE) // page-aligned for O_DIRECT
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(buf)
	timed := func(f func() error) float64 {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start).Seconds()
	}
	var r diskRates
	r.seqWrite = benchSeqMiB / timed(func() error {
		for i := range benchSeqMiB {
			if _, err := f.WriteAt(buf, int64(i)<<20); err != nil {
				return err
			}
		}
		return f.Sync()
	})
	r.seqRead = benchSeqMiB / timed(func() error {
		for i := range benchSeqMiB {
			if _, err := f.ReadAt(buf, int64(i)<<20); err != nil {
				return err
			}
		}
		return nil
	})
	r.randWrite = benchOps / timed(func() error {
		for i := range benchOps {
			if _, err := f.WriteAt(buf[:4096], int64((i*7919)%benchBlocks)*4096); err != nil {
				return err
			}
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				return err
			}
		}
		return nil
	})
	r.randRead = benchOps / timed(func() error {
		for i := range benchOps {
			if _, err := f.ReadAt(buf[:4096], int64((i*7919)%benchBlocks)*4096); err != nil {
				return err
			}
		}
		return nil
	})
	fmt.Fprintf(os.Stderr, "host: %+v\n", r)
	return r
}
