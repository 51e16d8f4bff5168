package kernelcache_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtpod/virtpod/pkg/kernel/kernelcache"
	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel"
	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel/pvhkerneltest"
)

// bzImage writes a bzImage holding kernel text (with or without the PVH note) and opens it, as
// a runner opens its VM's kernel before handing it over.
func bzImage(t *testing.T, text string, pvh bool) *os.File {
	t.Helper()
	return pvhkerneltest.Open(t, pvhkerneltest.BzImage(pvhkerneltest.ELF(bytes.Repeat([]byte(text), 4096), pvh), "lz4"))
}

// TestMain lets the test binary be the kernel unpacker, as the agent's binary is
// (virtpod-agent unpack-kernel).
func TestMain(m *testing.M) {
	if os.Getenv("KERNELCACHE_TEST_UNPACKER") == "1" {
		os.Exit(kernelcache.UnpackerMain())
	}
	os.Exit(m.Run())
}

// unpacker runs this test binary as the child process.
func unpacker() *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "KERNELCACHE_TEST_UNPACKER=1")
	return cmd
}

// newCache is a store that unpacks in a child process, as the node agent's does.
func newCache(t *testing.T, max int, maxBytes int64) (*kernelcache.Cache, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "kernels")
	c, err := kernelcache.New(dir, max, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	c.Unpacker = unpacker
	return c, dir
}

// TestOpenUnpacksOnceAndShares: the first VM's bzImage is unpacked into the store, read-only and
// readable by all; the next one with the same kernel gets the same file, not a new unpack; the
// sender's file offset is left where it was.
func TestOpenUnpacksOnceAndShares(t *testing.T) {
	c, dir := newCache(t, 0, 0)
	bz := bzImage(t, "kernel text ", true)
	if _, err := bz.Seek(100, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	k, err := c.Open(bz)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	img, _ := os.ReadFile(bz.Name())
	want, err := pvhkernel.Unpack(img)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(k)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the store handed out %d bytes (%v), want the %d-byte PVH kernel", len(got), err, len(want))
	}
	if _, err := k.Write([]byte("x")); err == nil {
		t.Error("the kernel handed out is writable: want a read-only descriptor")
	}
	st, _ := k.Stat()
	if st.Mode().Perm() != 0o444 {
		t.Errorf("the stored kernel has mode %v, want 0444 (readable by the runner's user, written by no one)", st.Mode().Perm())
	}
	if off, _ := bz.Seek(0, io.SeekCurrent); off != 100 {
		t.Errorf("the sender's offset moved to %d, want 100", off)
	}

	again := bzImage(t, "kernel text ", true) // another pod's copy of the same kernel
	k2, err := c.Open(again)
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Close()
	st2, _ := k2.Stat()
	if !os.SameFile(st, st2) {
		t.Error("the same kernel from another pod was unpacked again: want the stored file shared")
	}
	if n := len(c.Kernels()); n != 1 {
		t.Errorf("the store holds %d kernels, want 1", n)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("the store's directory holds %d files, want the one kernel", len(ents))
	}
}

// TestOpenRefuses: what cannot be unpacked is refused with the reason, leaves nothing in the
// store, and is refused again without another attempt.
func TestOpenRefuses(t *testing.T) {
	c, dir := newCache(t, 0, 0)
	noPVH := bzImage(t, "old kernel ", false)
	for range 2 {
		if _, err := c.Open(noPVH); err == nil || !strings.Contains(err.Error(), "no PVH entry") {
			t.Errorf("a kernel without CONFIG_PVH: %v, want the reason", err)
		}
	}
	big, err := os.Create(filepath.Join(t.TempDir(), "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	if err := big.Truncate(kernelcache.MaxBzImage + 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Open(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a bzImage past the bound: %v, want it refused", err)
	}
	d, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := c.Open(d); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v, want it refused", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("refusals left %d files in the store", len(ents))
	}
}

// TestEvictsLeastRecentlyUsed: past its bound the store removes the kernel handed out least
// recently; a VM holding that kernel open still reads it.
func TestEvictsLeastRecentlyUsed(t *testing.T) {
	c, _ := newCache(t, 2, 0)
	var held []*os.File
	open := func(text string) *os.File {
		k, err := c.Open(bzImage(t, text, true))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, k)
		return k
	}
	defer func() {
		for _, k := range held {
			k.Close()
		}
	}()
	first := open("first ")
	past := time.Now().Add(-time.Hour)
	_ = os.Chtimes(first.Name(), past, past)
	open("second ")
	_ = os.Chtimes(held[1].Name(), past.Add(time.Minute), past.Add(time.Minute))
	open("first ") // used again: now the most recent
	open("third ")
	kernels := c.Kernels()
	if len(kernels) != 2 {
		t.Fatalf("the store holds %d kernels, want its bound of 2", len(kernels))
	}
	if _, err := os.Stat(held[1].Name()); !os.IsNotExist(err) {
		t.Errorf("the least recently used kernel is still stored (%v)", err)
	}
	if _, err := os.Stat(first.Name()); err != nil {
		t.Errorf("the kernel used again was removed: %v", err)
	}
	if b, err := io.ReadAll(held[1]); err != nil || len(b) == 0 {
		t.Errorf("a VM holding the removed kernel can no longer read it: %d bytes, %v", len(b), err)
	}
}

// TestNewRemovesPartialFiles: a file an agent was writing when it died is not left to fill the
// disk.
func TestNewRemovesPartialFiles(t *testing.T) {
	dir := t.TempDir()
	for i := range 2 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf(".unpacking-%d", i)), []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kernelcache.New(dir, 0, 0); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("%d half-written files left", len(ents))
	}
}

// TestUnpackerThatDies: an unpacker killed (the OOM killer, the time limit) is a refusal that
// says so, and leaves nothing in the store.
func TestUnpackerThatDies(t *testing.T) {
	c, dir := newCache(t, 0, 0)
	c.Unpacker = func() *exec.Cmd { return exec.Command("sh", "-c", "kill -9 $$") }
	if _, err := c.Open(bzImage(t, "kernel text ", true)); err == nil || !strings.Contains(err.Error(), "signal: killed") || !strings.Contains(err.Error(), "more memory or time") {
		t.Errorf("a killed unpacker: %v, want it said", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a killed unpacker left %d files", len(ents))
	}
}

// TestInProcess: without an Unpacker the store unpacks the same kernel in its own process.
func TestInProcess(t *testing.T) {
	c, _ := newCache(t, 0, 0)
	c.Unpacker = nil
	k, err := c.Open(bzImage(t, "kernel text ", true))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if _, err := c.Open(bzImage(t, "old kernel ", false)); err == nil || !strings.Contains(err.Error(), "no PVH entry") {
		t.Errorf("in process, a kernel without CONFIG_PVH: %v", err)
	}
}

// TestEvictsPastItsBytes: the store's size bound holds however few kernels it has; the kernel
// just stored stays even when it alone is past it.
func TestEvictsPastItsBytes(t *testing.T) {
	c, _ := newCache(t, 0, 1) // one byte: no two kernels fit
	for _, text := range []string{"first ", "second "} {
		k, err := c.Open(bzImage(t, text, true))
		if err != nil {
			t.Fatal(err)
		}
		k.Close()
		if n := len(c.Kernels()); n != 1 {
			t.Errorf("after %q the store holds %d kernels, want the last one only", text, n)
		}
	}
}

// slowUnpacker is the real unpacker, started late by d.
func slowUnpacker(d time.Duration) func() *exec.Cmd {
	return func() *exec.Cmd {
		cmd := exec.Command("sh", "-c", fmt.Sprintf(`sleep %g; exec "$0"`, d.Seconds()), os.Args[0])
		cmd.Env = append(os.Environ(), "KERNELCACHE_TEST_UNPACKER=1")
		return cmd
	}
}

// TestOneUnpackingAtATime: while a kernel is being unpacked, another pod with the same kernel
// waits for it and gets the same file, and a pod with another kernel waits its turn.
func TestOneUnpackingAtATime(t *testing.T) {
	c, _ := newCache(t, 0, 0)
	c.Unpacker = slowUnpacker(time.Second)
	type opened struct {
		k   *os.File
		err error
	}
	first, same := make(chan opened, 1), make(chan opened, 1)
	a1, a2, b := bzImage(t, "kernel A ", true), bzImage(t, "kernel A ", true), bzImage(t, "kernel B ", true)
	go func() { k, err := c.Open(a1); first <- opened{k, err} }()
	time.Sleep(300 * time.Millisecond) // the first is unpacking
	go func() { k, err := c.Open(a2); same <- opened{k, err} }()
	kb, err := c.Open(b)
	if err != nil {
		t.Fatalf("another kernel after its turn: %v", err)
	}
	kb.Close()
	select {
	case o := <-first:
		first <- o
	default:
		t.Error("another kernel was unpacked while the first was: want one at a time")
	}
	o1, o2 := <-first, <-same
	if o1.err != nil || o2.err != nil {
		t.Fatalf("the unpacked kernel: %v; the pod that waited: %v", o1.err, o2.err)
	}
	defer o1.k.Close()
	defer o2.k.Close()
	s1, _ := o1.k.Stat()
	s2, _ := o2.k.Stat()
	if !os.SameFile(s1, s2) {
		t.Error("the pod that waited got another file than the one unpacked")
	}
	if n := len(c.Kernels()); n != 2 {
		t.Errorf("the store holds %d kernels, want A and B", n)
	}
}

// TestBusyWaitIsBounded: a pod whose turn does not come within BusyWait (a slow kernel ahead)
// is refused (ErrBusy) rather than held; the unpacking ahead still completes, and the refusal is
// not remembered.
func TestBusyWaitIsBounded(t *testing.T) {
	c, _ := newCache(t, 0, 0)
	c.Unpacker, c.BusyWait = slowUnpacker(3*time.Second), time.Second
	first := make(chan error, 1)
	go func() {
		k, err := c.Open(bzImage(t, "kernel A ", true))
		if err == nil {
			k.Close()
		}
		first <- err
	}()
	time.Sleep(300 * time.Millisecond) // the first is unpacking
	b := bzImage(t, "kernel B ", true)
	if _, err := c.Open(b); !errors.Is(err, kernelcache.ErrBusy) {
		t.Errorf("a kernel behind a slow one: %v, want ErrBusy", err)
	}
	if err := <-first; err != nil {
		t.Errorf("the unpacking ahead: %v", err)
	}
	c.Unpacker = unpacker
	if k, err := c.Open(b); err != nil {
		t.Errorf("the refused kernel once the store is idle: %v", err)
	} else {
		k.Close()
	}
}

// TestAgentFailureNotRemembered: a failure of the agent's own (here, an unpacker that cannot
// start) is not held against the kernel: the next pod with it gets it unpacked.
func TestAgentFailureNotRemembered(t *testing.T) {
	c, _ := newCache(t, 0, 0)
	c.Unpacker = func() *exec.Cmd { return exec.Command("/nonexistent/unpacker") }
	bz := bzImage(t, "kernel text ", true)
	if _, err := c.Open(bz); err == nil || !strings.Contains(err.Error(), "starting the kernel unpacker") {
		t.Fatalf("an unpacker that cannot start: %v", err)
	}
	c.Unpacker = unpacker
	k, err := c.Open(bz)
	if err != nil {
		t.Fatalf("the same kernel once the unpacker works: %v", err)
	}
	k.Close()
}

// BenchmarkOpen prices what a VM booting the test guest's bzImage waits for at the node agent
// (VIRTPOD_GUEST): stored, the hash of its 13.5 MB; new, the unpacking in a child process too.
func BenchmarkOpen(b *testing.B) {
	dir := os.Getenv("VIRTPOD_GUEST")
	if dir == "" {
		b.Skip("VIRTPOD_GUEST not set (make guest-fixture)")
	}
	bz, err := os.Open(filepath.Join(dir, "boot", "vmlinuz"))
	if err != nil {
		b.Fatal(err)
	}
	defer bz.Close()
	open := func(b *testing.B, c *kernelcache.Cache) {
		k, err := c.Open(bz)
		if err != nil {
			b.Fatal(err)
		}
		k.Close()
	}
	b.Run("stored", func(b *testing.B) {
		c, err := kernelcache.New(b.TempDir(), 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		c.Unpacker = unpacker
		open(b, c)
		b.ResetTimer()
		for range b.N {
			open(b, c)
		}
	})
	b.Run("new", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			c, err := kernelcache.New(b.TempDir(), 0, 0)
			if err != nil {
				b.Fatal(err)
			}
			c.Unpacker = unpacker
			b.StartTimer()
			open(b, c)
		}
	})
}
