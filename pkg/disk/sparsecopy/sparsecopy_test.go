package sparsecopy

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// allocated is the space a file takes on disk.
func allocated(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

func writeAt(t *testing.T, f *os.File, off int64, b []byte) {
	t.Helper()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func sameContents(t *testing.T, a, b string) {
	t.Helper()
	fa, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); ; off += int64(len(ba)) {
		na, ea := io.ReadFull(fa, ba)
		nb, _ := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			t.Fatalf("%s and %s differ in the MiB at %d", a, b, off)
		}
		if ea != nil {
			return
		}
	}
}

// sameSparse compares two files of the same size by reading only their data: each file's data
// ranges against the other file's bytes there. Everything else is a hole in both, so zero.
func sameSparse(t *testing.T, a, b string) {
	t.Helper()
	fa, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	ia, _ := fa.Stat()
	ib, _ := fb.Stat()
	if ia.Size() != ib.Size() {
		t.Fatalf("%s is %d bytes, %s %d", a, ia.Size(), b, ib.Size())
	}
	size := ia.Size()
	for _, pair := range [][2]*os.File{{fa, fb}, {fb, fa}} {
		for off := int64(0); off < size; {
			start, end, ok := NextData(pair[0], off, size)
			if !ok {
				t.Skip("the temp directory's file system does not report holes")
			}
			if start >= size {
				break
			}
			x, y := make([]byte, end-start), make([]byte, end-start)
			if _, err := pair[0].ReadAt(x, start); err != nil {
				t.Fatal(err)
			}
			if _, err := pair[1].ReadAt(y, start); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(x, y) {
				t.Fatalf("%s and %s differ in [%d, %d)", a, b, start, end)
			}
			off = end
		}
	}
}

// TestSparseDisk: a 10 GiB file with a few MiB of data, some of it explicitly written zeros (as a
// runtime unpacking a layer writes them), copies with only the non-zero data written.
func TestSparseDisk(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	disk := filepath.Join(src, "disk", "root.img")
	if err := os.MkdirAll(filepath.Dir(disk), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(disk)
	if err != nil {
		t.Fatal(err)
	}
	const size = 10 << 30
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("virtpod!"), 512) // one 4 KiB block
	writeAt(t, f, 0, data)
	writeAt(t, f, 4096, make([]byte, 8<<20))      // 8 MiB of allocated zeros
	writeAt(t, f, 1<<30+123, []byte("unaligned")) // straddles nothing, sits mid-block
	writeAt(t, f, 5<<30, bytes.Repeat(data, 256)) // 1 MiB
	writeAt(t, f, size-3, []byte("end"))          // data in the last, partial block
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(disk, 0o640); err != nil {
		t.Fatal(err)
	}

	var log bytes.Buffer
	st, err := Tree(filepath.Join(src, "disk"), filepath.Join(dst, "disk", "disk"), &log)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dst, "disk", "disk", "root.img")
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != size || fi.Mode().Perm() != 0o640 {
		t.Errorf("copy: size %d mode %v, want %d and 0640", fi.Size(), fi.Mode(), int64(size))
	}
	// Four non-zero blocks plus 1 MiB; allow the file system its metadata.
	if st.Written > 2<<20 || allocated(t, out) > 4<<20 {
		t.Errorf("wrote %d bytes, %d allocated: zero blocks were written", st.Written, allocated(t, out))
	}
	if st.Files != 1 || st.Bytes != size {
		t.Errorf("stats %+v", st)
	}
	sameSparse(t, disk, out)
	if !strings.Contains(log.String(), "root.img") {
		t.Errorf("log does not name the file: %q", log.String())
	}
}

// TestZerosWithoutHoles: when the source reports no holes (copyData without SEEK_DATA), zero
// blocks are still skipped by reading.
func TestZerosWithoutHoles(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	b := make([]byte, 3<<20+100)
	copy(b[1<<20:], "middle")
	copy(b[len(b)-4:], "tail")
	if err := os.WriteFile(src, b, 0o644); err != nil {
		t.Fatal(err)
	}
	in, _ := os.Open(src)
	defer in.Close()
	out, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := copyRange(in, out, 0, int64(len(b)), make([]byte, bufSize))
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Truncate(int64(len(b))); err != nil {
		t.Fatal(err)
	}
	out.Close()
	if want := int64(blockSize + 100); n != want { // the block with "middle", the last partial one
		t.Errorf("wrote %d bytes, want the two non-zero blocks (%d)", n, want)
	}
	sameContents(t, src, filepath.Join(dir, "dst"))
}

func TestTreeLayoutModesAndLinks(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "out")
	files := map[string]fs.FileMode{
		"vmlinuz":         0o644,
		"initrd.img":      0o600,
		"a/b/c/deep":      0o755,
		"a/readonly":      0o444,
		"empty":           0o644,
		"ro-dir/inside":   0o644,
		"a/b/setuid-tool": 0o755 | fs.ModeSetuid,
	}
	for p, mode := range files {
		full := filepath.Join(src, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		content := []byte(p)
		if p == "empty" {
			content = nil
		}
		if err := os.WriteFile(full, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(full, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(src, "ro-dir"), 0o555); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "a", "b"), 0o750); err != nil {
		t.Fatal(err)
	}
	// A link to a file is copied as the file; a link to a directory, a dangling link and a FIFO
	// are skipped.
	for name, target := range map[string]string{"vmlinuz-link": "vmlinuz", "dirlink": "a", "dangling": "nothing"} {
		if err := os.Symlink(target, filepath.Join(src, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	var log bytes.Buffer
	for round := range 2 { // the second round replaces the first's files (an init container restart)
		st, err := Tree(src, dst, &log)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if st.Files != len(files)+1 {
			t.Errorf("round %d: copied %d files, want %d", round, st.Files, len(files)+1)
		}
	}
	for p, mode := range files {
		fi, err := os.Stat(filepath.Join(dst, p))
		if err != nil {
			t.Error(err)
			continue
		}
		if got := fi.Mode() & modeBits; got != mode {
			t.Errorf("%s: mode %v, want %v", p, got, mode)
		}
		sameContents(t, filepath.Join(src, p), filepath.Join(dst, p))
	}
	for dir, mode := range map[string]fs.FileMode{"ro-dir": 0o555, "a/b": 0o750, "a": 0o755} {
		if fi, err := os.Stat(filepath.Join(dst, dir)); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("dir %s: %v %v, want %v", dir, fi.Mode(), err, mode)
		}
	}
	if fi, err := os.Lstat(filepath.Join(dst, "vmlinuz-link")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("vmlinuz-link: %v %v, want a regular file", fi, err)
	}
	for _, skipped := range []string{"dirlink", "dangling", "fifo"} {
		if _, err := os.Lstat(filepath.Join(dst, skipped)); err == nil {
			t.Errorf("%s was copied", skipped)
		}
		if !strings.Contains(log.String(), "skipping "+filepath.Join(src, skipped)) {
			t.Errorf("log does not report skipping %s:\n%s", skipped, log.String())
		}
	}
}

// TestSymlinkedSource: a source given as a symlink to a directory is copied from its target.
func TestSymlinkedSource(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "real", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := Tree(filepath.Join(dir, "link"), filepath.Join(dir, "out"), io.Discard); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out", "f")); err != nil || string(b) != "x" {
		t.Errorf("out/f: %q %v", b, err)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "sub", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ src, dst, want string }{
		{filepath.Join(dir, "missing"), filepath.Join(dir, "out"), "source: stat " + filepath.Join(dir, "missing")},
		{file, filepath.Join(dir, "out"), "source " + file + " is not a directory"},
		{src, filepath.Join(src, "sub", "copy"), "is inside source"},
		{src, src, "is inside source"},
		// A file where a directory must go: the error names the path.
		{src, filepath.Join(file, "out"), file + ": not a directory"},
	} {
		if _, err := Tree(tc.src, tc.dst, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Tree(%s, %s) = %v, want %q", tc.src, tc.dst, err, tc.want)
		}
	}
	// A directory in the way of a file.
	out := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(out, "sub", "f", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Tree(src, out, io.Discard); err == nil || !strings.Contains(err.Error(), filepath.Join(out, "sub", "f")) {
		t.Errorf("directory in the way: %v", err)
	}
	if os.Geteuid() != 0 { // root reads anything
		unreadable := filepath.Join(dir, "unreadable")
		if err := os.MkdirAll(unreadable, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(unreadable, "secret"), []byte("x"), 0o000); err != nil {
			t.Fatal(err)
		}
		if _, err := Tree(unreadable, filepath.Join(dir, "out2"), io.Discard); err == nil || !strings.Contains(err.Error(), "secret") {
			t.Errorf("unreadable file: %v", err)
		}
	}
}

// TestWriteFailure: a write that fails (here: past the file size limit, as a full disk would)
// fails the copy with the destination's path.
func TestWriteFailure(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "disk.img"), bytes.Repeat([]byte("x"), 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	// Go ignores SIGXFSZ, so the write returns EFBIG. Tests in this package run one at a time.
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 1 << 20, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	_, err := Tree(src, filepath.Join(dst, "out"), io.Discard)
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if err == nil || !strings.Contains(err.Error(), "write "+filepath.Join(dst, "out", "disk.img")) {
		t.Errorf("err = %v, want a write error naming the destination", err)
	}
}
