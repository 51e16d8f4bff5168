// Package kernelcache is the node agent's store of guest kernels unpacked from bzImages. A
// runner whose VM boots a bzImage hands it to the agent with its network namespace
// (pkg/handoff) and gets back the PVH vmlinux inside it (pkg/kernel/pvhkernel): QEMU then loads the
// kernel from that mapped file instead of holding a copy of the bzImage for the VM's life
// (docs/images.md). The agent writes the file, so its page cache is charged to the agent's
// cgroup, not the VM's pod; it is shared by every VM of the node booting that kernel, and
// reclaimable.
//
// The bzImage comes from a pod, so from someone untrusted. Its size is bounded. It is copied
// into the store's own file before it is unpacked, and named by that copy's SHA-256, so what a
// kernel is stored under is what it was unpacked from, whatever the sender does to its file
// meanwhile. The unpacking itself (decompressors whose memory a hostile header can inflate)
// runs in a child process (Cache.Unpacker, UnpackerMain) that the kernel's OOM killer takes
// first, one at a time, under a time limit; its result is checked as pvhkernel checks it. The
// store keeps at most MaxEntries kernels, the least recently handed out removed first; a kernel
// handed out stays readable to whoever holds it open.
package kernelcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel"
)

// MaxBzImage bounds the bzImage a runner may hand over: distribution kernels are 8 to 16 MB.
const MaxBzImage = 64 << 20

// What a Cache keeps unless told otherwise: 8 kernels, 1 GiB (distribution kernels unpack to
// 40 to 80 MB; a hostile payload may claim up to pvhkernel's 512 MB bound).
const (
	DefaultMaxEntries = 8
	DefaultMaxBytes   = 1 << 30
)

const (
	suffix  = ".vmlinux"
	partial = ".unpacking-"
	// maxRefused bounds the memory of bzImages that did not unpack; past it, it starts over.
	maxRefused = 64
)

// Cache is the store in one directory. Open it with New.
type Cache struct {
	dir        string
	maxEntries int
	maxBytes   int64
	// Unpacker makes the child process that unpacks a kernel: it runs UnpackerMain, with the
	// bzImage as descriptor 3 and the file to write as 4. nil unpacks in this process: for
	// tests and callers that trust their input.
	Unpacker func() *exec.Cmd
	// BusyWait is how long a pod waits for the unpackings ahead of it (0: DefaultBusyWait).
	BusyWait time.Duration

	mu      sync.Mutex
	refused map[string]string // digest → why it did not unpack
	busy    chan struct{}     // while a kernel is being unpacked; closed when it is done
}

// UnpackTimeout bounds one unpacking: a distribution kernel takes well under a second.
const UnpackTimeout = 10 * time.Second

// DefaultBusyWait bounds how long a pod waits for unpackings other pods started (one runs at a time):
// long enough for a burst of distribution kernels (0.4 s each), short enough that pods handing
// over slow hostile kernels hold the agent's workers (and so other pods' network plumbing) for
// seconds, not UnpackTimeout each.
const DefaultBusyWait = 5 * time.Second

// ErrBusy is a refusal when the unpackings ahead of a pod's kernel outlast the Cache's BusyWait. The VM boots
// its bzImage; the next VM with that kernel gets it unpacked.
var ErrBusy = errors.New("the node agent is busy unpacking other kernels")

// New opens the store in dir, keeping at most maxEntries kernels and maxBytes of them (0: the
// defaults), and removes files a previous agent left half-written.
func New(dir string, maxEntries int, maxBytes int64) (*Cache, error) {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kernel cache %s: %w", dir, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("kernel cache %s: %w", dir, err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), partial) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return &Cache{dir: dir, maxEntries: maxEntries, maxBytes: maxBytes, refused: map[string]string{}}, nil
}

// Open returns, read-only, the PVH kernel inside the bzImage bz, unpacking it unless the store
// has it: the caller closes it. bz is read with pread, so the sender's file offset is left
// alone. The error says why there is no kernel: a bzImage that is too large, or one that does
// not unpack (no PVH entry, an xz payload, ...), remembered by content.
func (c *Cache) Open(bz *os.File) (*os.File, error) {
	st, err := bz.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("the kernel handed over is not a regular file (%v)", st.Mode().Type())
	}
	if st.Size() > MaxBzImage {
		return nil, tooLarge(st.Size())
	}
	digest, err := copyHashed(io.Discard, bz)
	if err != nil {
		return nil, err
	}
	wait := c.BusyWait
	if wait <= 0 {
		wait = DefaultBusyWait
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		if k, known, err := c.lookup(digest); known {
			c.mu.Unlock()
			return k, err
		}
		if c.busy != nil {
			// Another pod's unpacking (of this kernel or another): wait for it, then look again.
			busy := c.busy
			c.mu.Unlock()
			select {
			case <-busy:
				continue
			case <-deadline.C:
				return nil, ErrBusy
			}
		}
		done := make(chan struct{})
		c.busy = done
		c.mu.Unlock()

		k, stored, err := c.unpackNew(bz)
		c.mu.Lock()
		c.busy = nil
		close(done)
		if r := (*refusal)(nil); errors.As(err, &r) {
			c.refuse(r, digest, stored)
		}
		c.mu.Unlock()
		return k, err
	}
}

// unpackNew unpacks bz into the store from a copy of our own, named by what the copy holds
// (stored), and returns it open.
func (c *Cache) unpackNew(bz *os.File) (_ *os.File, stored string, _ error) {
	cp, err := os.CreateTemp(c.dir, partial)
	if err != nil {
		return nil, "", fmt.Errorf("kernel cache: %w", err)
	}
	defer func() {
		cp.Close()
		os.Remove(cp.Name())
	}()
	if stored, err = copyHashed(cp, bz); err != nil {
		return nil, "", err
	}
	path := filepath.Join(c.dir, stored+suffix)
	if _, err := os.Stat(path); err != nil {
		if err := c.unpack(cp, path); err != nil {
			return nil, stored, err
		}
		c.evict(path)
	}
	k, err := os.Open(path)
	return k, stored, err
}

// refusal is a kernel's own reason not to unpack (what it holds, or the unpacker it killed),
// remembered by its content; a failure of the agent's (a full disk, say) is not.
type refusal struct{ error }

func (r *refusal) Unwrap() error { return r.error }

// refuse remembers why the kernels named by digests did not unpack ("" names none).
func (c *Cache) refuse(err error, digests ...string) {
	if len(c.refused) >= maxRefused {
		c.refused = map[string]string{}
	}
	for _, d := range digests {
		if d != "" {
			c.refused[d] = err.Error()
		}
	}
}

// lookup is what the store knows of digest: its kernel, or why it has none; known false when it
// has not met it.
func (c *Cache) lookup(digest string) (*os.File, bool, error) {
	if why, ok := c.refused[digest]; ok {
		return nil, true, errors.New(why)
	}
	path := filepath.Join(c.dir, digest+suffix)
	f, err := os.Open(path)
	if err != nil {
		return nil, false, nil
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now) // handed out: the last to be removed
	return f, true, nil
}

// copyHashed copies bz (from its start, by pread) to w, at most MaxBzImage bytes, and returns
// the SHA-256 of what it copied.
func copyHashed(w io.Writer, bz *os.File) (string, error) {
	h := sha256.New()
	if err := copyBounded(io.MultiWriter(w, h), bz); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyBounded copies bz from its start (by pread) to w, refusing one of more than MaxBzImage
// bytes.
func copyBounded(w io.Writer, bz *os.File) error {
	n, err := io.Copy(w, io.NewSectionReader(bz, 0, MaxBzImage+1))
	if err != nil {
		return fmt.Errorf("reading the bzImage: %w", err)
	}
	if n > MaxBzImage {
		return tooLarge(n)
	}
	return nil
}

func tooLarge(n int64) error {
	return fmt.Errorf("the bzImage (%d bytes or more) is larger than the %d bytes the node agent unpacks", n, MaxBzImage)
}

// unpack writes the kernel inside src at path, whole or not at all, readable by all (the
// runner's user opens it again through /proc/self/fd) and writable by no one.
func (c *Cache) unpack(src *os.File, path string) (err error) {
	tmp, err := os.CreateTemp(c.dir, partial)
	if err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	defer func() {
		tmp.Close()
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if c.Unpacker == nil {
		if err = unpackFrom(src, tmp); err != nil {
			err = &refusal{err}
		}
	} else {
		err = c.runUnpacker(src, tmp)
	}
	if err != nil {
		return err
	}
	if err := tmp.Chmod(0o444); err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	// Synced before it is named: a crash leaves the old state or the whole file, never a named
	// file cut short.
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	return nil
}

// runUnpacker runs the child process on src and dst and says why it failed: its own words, or
// how it ended.
func (c *Cache) runUnpacker(src, dst *os.File) error {
	cmd := c.Unpacker()
	cmd.ExtraFiles = []*os.File{src, dst}
	var stderr strings.Builder
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4096}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the kernel unpacker: %w", err)
	}
	timer := time.AfterFunc(UnpackTimeout, func() { _ = cmd.Process.Kill() })
	err := cmd.Wait()
	timer.Stop()
	if err == nil {
		return nil
	}
	if msg := strings.TrimSpace(stderr.String()); msg != "" && cmd.ProcessState.ExitCode() == unpackRefused {
		return &refusal{errors.New(msg)}
	}
	return &refusal{fmt.Errorf("the kernel unpacker ended (%v) within its %v: the kernel may need more memory or time to unpack than the node agent gives it", cmd.ProcessState, UnpackTimeout)}
}

// unpackRefused is the unpacker's exit code for a kernel it refuses, saying why on stderr.
const unpackRefused = 3

// UnpackerMain is the child process Cache.Unpacker runs: it unpacks the bzImage at descriptor 3
// into the file at descriptor 4 and returns the process's exit code, unpackRefused with the
// reason on stderr for a kernel it refuses. It asks the OOM killer to take it before anything
// else in its cgroup: a hostile header can make a decompressor reach for memory.
func UnpackerMain() int {
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	err := unpackFrom(os.NewFile(3, "bzImage"), os.NewFile(4, "vmlinux"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return unpackRefused
	}
	return 0
}

// unpackFrom unpacks the bzImage src into dst, an empty file.
func unpackFrom(src, dst *os.File) error {
	var img bytes.Buffer
	if err := copyBounded(&img, src); err != nil {
		return err
	}
	return pvhkernel.UnpackTo(dst, img.Bytes())
}

type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.n -= k
		_, _ = l.w.Write(p[:k])
	}
	return len(p), nil
}

// evict removes the least recently handed-out kernels while the store holds more than
// maxEntries or maxBytes, never keep (the one just stored).
func (c *Cache) evict(keep string) {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	type entry struct {
		path string
		used time.Time
		size int64
	}
	var all []entry
	var total int64
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), suffix) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		all = append(all, entry{filepath.Join(c.dir, e.Name()), info.ModTime(), info.Size()})
		total += info.Size()
	}
	sort.Slice(all, func(i, j int) bool { return all[i].used.Before(all[j].used) })
	n := len(all)
	for _, e := range all {
		if n <= c.maxEntries && total <= c.maxBytes {
			return
		}
		if e.path == keep {
			continue
		}
		if os.Remove(e.path) == nil {
			n, total = n-1, total-e.size
		}
	}
}

// Kernels lists the kernels the store holds, by digest (the tests read it).
func (c *Cache) Kernels() []string {
	ents, _ := os.ReadDir(c.dir)
	var out []string
	for _, e := range ents {
		if d, ok := strings.CutSuffix(e.Name(), suffix); ok {
			out = append(out, d)
		}
	}
	return out
}
