package diskcopy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/pkg/disk/sparsecopy"
	"github.com/virtpod/virtpod/runner/binaries"
)

// Marker is what MarkerName records of a completed disk.
type Marker struct {
	// Drive is the VM's drive the disk is a copy of ("" when a copy was not told).
	Drive string `json:"drive,omitempty"`
	// Size is the disk file's size in bytes.
	Size int64 `json:"size"`
	// Base says the disk started as a copy of an earlier snapshot's (an incremental backup).
	Base bool `json:"base"`
	// From is the file a direct copy read (disk-copy); empty for an NBD target.
	From        string    `json:"from,omitempty"`
	CompletedAt time.Time `json:"completedAt"`
}

// ReadMarker reads the marker of the disk file file.
func ReadMarker(file string) (*Marker, error) {
	b, err := os.ReadFile(MarkerPath(file))
	if err != nil {
		return nil, err
	}
	var m Marker
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", MarkerPath(file), err)
	}
	return &m, nil
}

// writeMarker writes file's marker, synced, and syncs its directory: only then is the disk
// complete.
func writeMarker(file string, m Marker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := writeFileSync(MarkerPath(file), append(b, '\n')); err != nil {
		return fmt.Errorf("marker of %s: %w", file, err)
	}
	return nil
}

// writeFileSync writes path through a temporary file renamed over it, both synced, so a reader
// sees all of it or nothing.
func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return sparsecopy.SyncDir(filepath.Dir(path))
}

func syncFile(p string) error {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync %s: %w", p, err)
	}
	return nil
}

// exists says whether something (a file, a socket, a dangling symlink) is at p.
func exists(p string) bool {
	_, err := os.Lstat(p)
	return !errors.Is(err, fs.ErrNotExist)
}

// supportsDirect says whether file opens with O_DIRECT (tmpfs refuses it), which decides between
// qemu-nbd's cache=none and cache=writeback, as the runner decides for a VM's disks.
func supportsDirect(file string) bool {
	fd, err := unix.Open(file, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// FindQEMUNBD finds qemu-nbd: $VIRTPOD_QEMU_NBD_BINARY, else next to qemu-img (the runner's
// qemu-img, $VIRTPOD_QEMU_IMG_BINARY or the image's), else the image's path, else on PATH.
func FindQEMUNBD() (string, error) {
	if p := os.Getenv(EnvQEMUNBD); p != "" {
		return p, nil
	}
	nextToImg := filepath.Join(filepath.Dir(binaries.FromEnv().QEMUImg), QEMUNBDName)
	for _, p := range []string{nextToImg, QEMUNBD} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(QEMUNBDName); err == nil {
		return p, nil
	}
	return "", refuse("%s not found (not next to qemu-img at %s, not at %s, not on PATH): the runner image must carry it (Debian's qemu-utils); set %s or --qemu-nbd-binary to its path",
		QEMUNBDName, nextToImg, QEMUNBD, EnvQEMUNBD)
}

// A copy logs its progress every progressBytes, at most once per progressInterval.
const (
	progressBytes = 64 << 20
	copyBuf       = 1 << 20
)

var progressInterval = time.Second // a variable for tests

// sparseCopy copies src into dst, a new file, at the same offsets, skipping src's holes and
// its zero blocks (sparsecopy's helpers), then sizes dst to size (≥ src's size; the rest a hole)
// and syncs it. It logs progress on log and stops when ctx ends. It returns the bytes written.
func sparseCopy(ctx context.Context, src, dst string, size int64, log *zap.Logger) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return 0, err
	}
	srcSize := fi.Size()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	p := progress{log: log.With(zap.String("from", src), zap.String("to", dst)), total: srcSize, last: time.Now(), next: progressBytes}
	written, err := copyData(ctx, in, out, srcSize, &p)
	if err == nil {
		err = out.Truncate(max(size, srcSize))
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return written, fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	p.done(srcSize, written)
	return written, nil
}

// copyData writes the non-zero blocks of in's first size bytes to the same offsets of out.
func copyData(ctx context.Context, in, out *os.File, size int64, p *progress) (int64, error) {
	buf := make([]byte, copyBuf)
	var written int64
	seekable := true
	for off := int64(0); off < size; {
		start, end := off, size
		if seekable {
			var ok bool
			start, end, ok = sparsecopy.NextData(in, off, size)
			seekable = ok
		}
		if start >= size {
			break
		}
		for pos := start; pos < end; {
			if ctx.Err() != nil {
				return written, stopped(ctx, "stopped")
			}
			n := int(min(int64(len(buf)), end-pos))
			if _, err := in.ReadAt(buf[:n], pos); err != nil {
				return written, fmt.Errorf("read %s at %d: %w (did it shrink while being copied?)", in.Name(), pos, err)
			}
			w, err := sparsecopy.WriteAt(out, buf[:n], pos, false)
			written += w
			if err != nil {
				return written, err
			}
			pos += int64(n)
			p.at(pos, written)
		}
		off = end
	}
	return written, nil
}

// progress logs a copy's progress now and then.
type progress struct {
	log   *zap.Logger
	total int64
	last  time.Time
	next  int64
}

func (p *progress) at(done, written int64) {
	if done < p.next || time.Since(p.last) < progressInterval {
		return
	}
	p.last = time.Now()
	p.next = done + progressBytes
	p.log.Info("copying", p.fields(done, written)...)
}

func (p *progress) done(done, written int64) { p.log.Info("copied", p.fields(done, written)...) }

func (p *progress) fields(done, written int64) []zap.Field {
	pct := int64(100)
	if p.total > 0 {
		pct = 100 * done / p.total
	}
	return []zap.Field{zap.Int64("doneBytes", done), zap.Int64("totalBytes", p.total), zap.Int64("percent", pct), zap.Int64("writtenBytes", written)}
}

// tail keeps the last bytes written to it: a child's stderr for an error message.
type tail struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func newTail(n int) *tail { return &tail{max: n} }

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
