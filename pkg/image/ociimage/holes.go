package ociimage

import (
	"errors"
	"io"
	"os"

	"github.com/virtpod/virtpod/pkg/disk/sparsecopy"
)

// holeReader reads the first size bytes of a file, making the zeros of its holes in memory
// instead of reading them: a 10 GiB sparse root disk is mostly holes, and reading those through
// the file system is the slowest part of packing it.
type holeReader struct {
	f       *os.File
	off     int64
	size    int64
	hole    int64 // off < hole: zeros up to hole
	data    int64 // off < data: file contents up to data
	noHoles bool  // the file system does not report holes
}

func newHoleReader(f *os.File, size int64) *holeReader {
	return &holeReader{f: f, size: size}
}

func (r *holeReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	if r.off >= r.hole && r.off >= r.data {
		r.next()
	}
	if r.off < r.hole {
		n := int(min(int64(len(p)), r.hole-r.off))
		clear(p[:n])
		r.off += int64(n)
		return n, nil
	}
	n, err := r.f.ReadAt(p[:min(int64(len(p)), r.data-r.off)], r.off)
	r.off += int64(n)
	if errors.Is(err, io.EOF) && n > 0 {
		err = nil // the caller checks the total size
	}
	return n, err
}

// next finds what starts at r.off: a hole (up to the next data) or data (up to the next hole).
func (r *holeReader) next() {
	if r.noHoles {
		r.data = r.size
		return
	}
	start, end, ok := sparsecopy.NextData(r.f, r.off, r.size)
	switch {
	case !ok:
		r.noHoles, r.data = true, r.size
	case start > r.off:
		r.hole = start // r.size when only a hole is left
	default:
		r.data = end
	}
}
