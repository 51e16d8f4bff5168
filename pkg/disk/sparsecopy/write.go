package sparsecopy

import (
	"bytes"
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// The helpers below are the one place virtpod writes files sparse and finds their holes:
// vmcopy's copies, the fills of disks on volumes (pkg/disk/volumedisk) and the packing of root disks
// into images (pkg/image/ociimage) use them.

var zeroBlock [blockSize]byte

func isZero(b []byte) bool { return bytes.Equal(b, zeroBlock[:len(b)]) }

// WriteAt writes b at off run by run: runs of non-zero blocks with one pwrite each, runs of zero
// blocks not at all. With punch, the zero runs are punched instead of skipped, so they read as
// zeros also where the file held data before (a resumed fill over a dead one's half-write).
func WriteAt(f *os.File, b []byte, off int64, punch bool) (written int64, err error) {
	for start := 0; start < len(b); {
		zero := isZero(b[start:min(start+blockSize, len(b))])
		end := start
		for end < len(b) && isZero(b[end:min(end+blockSize, len(b))]) == zero {
			end = min(end+blockSize, len(b))
		}
		switch {
		case !zero:
			_, err = f.WriteAt(b[start:end], off+int64(start))
			written += int64(end - start)
		case punch:
			err = punchHole(f, off+int64(start), b[start:end])
		}
		if err != nil {
			return written, err
		}
		start = end
	}
	return written, nil
}

// punchHole makes len(zeros) bytes at off read as zeros without allocating them; where the file
// system cannot punch holes, it writes the zeros.
func punchHole(f *os.File, off int64, zeros []byte) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, int64(len(zeros)))
	if err == nil {
		return nil
	}
	_, err = f.WriteAt(zeros, off)
	return err
}

// NextData returns the next data range at or after off in f's first size bytes, from
// SEEK_DATA/SEEK_HOLE (start == size: only a hole is left); ok is false when the file system
// does not report holes, and the rest of the file is then one range.
func NextData(f *os.File, off, size int64) (start, end int64, ok bool) {
	start, err := f.Seek(off, unix.SEEK_DATA)
	if errors.Is(err, syscall.ENXIO) {
		return size, size, true
	}
	if err != nil {
		return off, size, false
	}
	if start >= size {
		return size, size, true
	}
	end, err = f.Seek(start, unix.SEEK_HOLE)
	// A range that does not move on would have a caller read it again forever.
	if err != nil || end > size || end <= start {
		end = size
	}
	return start, end, true
}
