// Package sparsecopy copies a directory tree of regular files without writing runs of zero
// blocks, so a 10 GiB raw disk holding 200 MiB of data costs 200 MiB of writes and of space.
// It is the library of /virtpod/bin/vmcopy, the copy program every VM image carries for
// clusters without image volumes (init containers copy the kernel and disk into emptyDirs).
//
// Holes are found with SEEK_DATA/SEEK_HOLE where the source file system reports them; inside
// data (and everywhere on file systems that do not report holes) zero blocks are detected by
// reading. Both are needed: a container runtime unpacking an image layer writes a disk image's
// zeros out in full, so its snapshot file has no holes left to report.
package sparsecopy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

const (
	// blockSize is the unit of zero detection: the block size of ext4, xfs and tmpfs, so a
	// skipped block is a block the destination file system does not allocate.
	blockSize = 4096
	bufSize   = 1 << 20
)

// Stats counts what a copy did.
type Stats struct {
	Files   int
	Bytes   int64 // file sizes
	Written int64 // bytes written: Bytes minus the zero runs skipped
}

// modeBits are the parts of a file's mode a copy keeps.
const modeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// Tree copies the regular files under src into dst, recursively, creating directories with
// src's permissions. A symlink to a regular file is copied as that file (the runner would read
// through it from an image volume too); other symlinks, devices, FIFOs and sockets are skipped
// and reported on log. Files already in dst are replaced, so a copy interrupted by a restart can
// run again. Every file and directory written is fsynced before Tree returns.
func Tree(src, dst string, log io.Writer) (Stats, error) {
	var st Stats
	fi, err := os.Stat(src)
	if err != nil {
		return st, fmt.Errorf("source: %w", err)
	}
	if !fi.IsDir() {
		return st, fmt.Errorf("source %s is not a directory", src)
	}
	// The walk does not follow a symlink given as its root: start at what it points to.
	if src, err = filepath.EvalSymlinks(src); err != nil {
		return st, fmt.Errorf("source: %w", err)
	}
	if err := checkNotInside(src, dst); err != nil {
		return st, err
	}
	type dir struct {
		path string
		perm fs.FileMode
	}
	var dirs []dir
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := os.Stat(p) // follows symlinks: a link to a file is copied as the file
		switch {
		case d.Type()&fs.ModeSymlink != 0 && err != nil:
			fmt.Fprintf(log, "skipping %s: a symlink to nothing (%v)\n", p, err)
			return nil
		case err != nil:
			return err
		case d.IsDir():
			// Writable for now (also when a previous attempt left it read-only); the source's
			// permissions are set once the contents are in.
			if err := os.MkdirAll(target, 0o700); err != nil {
				return err
			}
			if err := os.Chmod(target, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, dir{target, info.Mode() & modeBits})
			return nil
		case info.IsDir():
			fmt.Fprintf(log, "skipping %s: a symlink to a directory\n", p)
			return nil
		case !info.Mode().IsRegular():
			fmt.Fprintf(log, "skipping %s: a %s, not a regular file\n", p, kind(info.Mode()))
			return nil
		}
		written, err := File(p, target, info.Mode()&modeBits)
		if err != nil {
			return err
		}
		st.Files++
		st.Bytes += info.Size()
		st.Written += written
		fmt.Fprintf(log, "%s -> %s: %s, %s written\n", p, target, mib(info.Size()), mib(written))
		return nil
	})
	if err != nil {
		return st, err
	}
	// Deepest first, so a read-only directory is made read-only after its children.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i].path, dirs[i].perm); err != nil {
			return st, err
		}
		if err := SyncDir(dirs[i].path); err != nil {
			return st, err
		}
	}
	// The new top directory's own entry lives in its parent.
	return st, SyncDir(filepath.Dir(filepath.Clean(dst)))
}

// checkNotInside refuses a destination inside the source, which the walk would copy into itself.
func checkNotInside(src, dst string) error {
	s, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	d, err := filepath.Abs(dst)
	if err != nil {
		return err
	}
	// The destination may not exist yet: resolve its longest existing prefix.
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			d = filepath.Join(r, rest)
			break
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		rest = filepath.Join(filepath.Base(d), rest)
		d = parent
	}
	if d == s || strings.HasPrefix(d, s+string(filepath.Separator)) || s == "/" {
		return fmt.Errorf("destination %s is inside source %s: copy into a directory outside it", dst, src)
	}
	return nil
}

// File copies the regular file src to dst with permissions perm, skipping zero blocks, and
// fsyncs it. Whatever is at dst is replaced. It returns the number of bytes written.
func File(src, dst string, perm fs.FileMode) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%s is not a regular file", src)
	}
	// A previous attempt's file may be read-only; replace it rather than open it for writing.
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	written, err := copyData(in, out, fi.Size())
	if err == nil {
		// Trailing zeros were skipped: the size makes them a hole.
		err = out.Truncate(fi.Size())
	}
	if err == nil {
		err = out.Chmod(perm)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return written, fmt.Errorf("copy %s: %w", src, err)
	}
	return written, nil
}

// copyData writes the non-zero blocks of in's first size bytes to the same offsets of out.
func copyData(in, out *os.File, size int64) (int64, error) {
	buf := make([]byte, bufSize)
	var written int64
	seekable := true
	for off := int64(0); off < size; {
		start, end := off, size
		if seekable {
			var ok bool
			start, end, ok = NextData(in, off, size)
			seekable = ok
		}
		if start >= size {
			break
		}
		n, err := copyRange(in, out, start, end, buf)
		written += n
		if err != nil {
			return written, err
		}
		off = end
	}
	return written, nil
}

// copyRange copies [start, end) of in to out, block by block, writing each run of non-zero
// blocks with one pwrite and skipping the zero ones.
func copyRange(in, out *os.File, start, end int64, buf []byte) (int64, error) {
	var written int64
	for pos := start; pos < end; {
		n := int(min(int64(len(buf)), end-pos))
		if _, err := in.ReadAt(buf[:n], pos); err != nil {
			if errors.Is(err, io.EOF) {
				return written, fmt.Errorf("%s shrank while being copied", in.Name())
			}
			return written, err
		}
		w, err := WriteAt(out, buf[:n], pos, false)
		written += w
		if err != nil {
			return written, err
		}
		pos += int64(n)
	}
	return written, nil
}

// SyncDir fsyncs the directory p, so the names made or renamed in it last.
func SyncDir(p string) error {
	d, err := os.Open(p)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", p, err)
	}
	return nil
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "special file"
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
