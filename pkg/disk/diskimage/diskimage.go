// Package diskimage prepares the guest's writable root disk: a qcow2 overlay in the pod's state
// directory backed by the read-only base image, so the base (shared, mounted read-only) is never
// written and the guest still sees a writable disk of the requested size.
package diskimage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Formats the runner handles.
const (
	FormatQCOW2 = "qcow2"
	FormatRaw   = "raw"
)

var qcow2Magic = []byte{'Q', 'F', 'I', 0xfb}

// Inspect returns an image's format (by the qcow2 magic; anything else is raw) and its virtual
// size in bytes.
func Inspect(path string) (format string, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	hdr := make([]byte, 32)
	n, err := io.ReadFull(f, hdr)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", 0, fmt.Errorf("read %s: %w", path, err)
	}
	if n >= 32 && bytes.Equal(hdr[:4], qcow2Magic) {
		// qcow2 header: magic, version, backing file offset and size, cluster bits, then the
		// virtual size as a big-endian uint64 at byte 24.
		return FormatQCOW2, int64(binary.BigEndian.Uint64(hdr[24:32])), nil
	}
	st, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	return FormatRaw, st.Size(), nil
}

// Overlay describes the prepared root disk.
type Overlay struct {
	Path       string
	Format     string // always qcow2
	Base       string
	BaseFormat string
	SizeBytes  int64
	Reused     bool // an overlay from an earlier run of this pod's runner was kept
}

// CreateOverlay makes (or keeps) a qcow2 overlay at path backed by base. sizeMiB 0 keeps the
// base's size; a size smaller than the base is refused because the guest's file system would
// be cut off. An existing overlay is kept: the state directory outlives a container restart,
// and the guest's disk should too.
func CreateOverlay(ctx context.Context, qemuImg, base, path string, sizeMiB int64) (Overlay, error) {
	baseFormat, baseSize, err := Inspect(base)
	if err != nil {
		return Overlay{}, fmt.Errorf("--root-disk: %w", err)
	}
	size := baseSize
	if sizeMiB > 0 {
		size = sizeMiB << 20
		if size < baseSize {
			return Overlay{}, fmt.Errorf("--disk-size-mib: %d MiB is smaller than the root-disk image (%d MiB); use at least %d", sizeMiB, baseSize>>20, (baseSize+(1<<20)-1)>>20)
		}
	}
	o := Overlay{Path: path, Format: FormatQCOW2, Base: base, BaseFormat: baseFormat, SizeBytes: size}
	if f, s, err := Inspect(path); err == nil && f == FormatQCOW2 && s == size {
		o.Reused = true
		return o, nil
	}
	absBase, err := filepath.Abs(base)
	if err != nil {
		return o, err
	}
	tmp := path + ".tmp"
	cmd := exec.CommandContext(ctx, qemuImg, "create", "-q", "-f", FormatQCOW2, "-F", baseFormat, "-b", absBase, tmp, fmt.Sprintf("%d", size))
	if out, err := cmd.CombinedOutput(); err != nil {
		return o, fmt.Errorf("create the root-disk overlay: %s: %w: %s", qemuImg, err, strings.TrimSpace(string(out)))
	}
	return o, os.Rename(tmp, path)
}

// SupportsDirectIO reports whether files in dir can be opened with O_DIRECT (tmpfs cannot),
// which decides between QEMU's cache=none and cache=writeback.
func SupportsDirectIO(dir string) bool {
	f, err := os.CreateTemp(dir, ".odirect-")
	if err != nil {
		return false
	}
	name := f.Name()
	f.Close()
	defer os.Remove(name)
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}
