// Package ociimage builds container images from files on this machine, without a container
// engine: deterministic layers (sorted entries, fixed timestamps, root ownership), an image
// config, and an image archive that `ctr images import` and `docker load` accept.
package ociimage

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Layer collects the entries of one image layer. Paths are absolute, as inside the image;
// parent directories are added with mode 0755 when not added explicitly.
type Layer struct {
	// Name says what the layer holds; it becomes the layer's history entry.
	Name string
	// SpoolDir, when set, makes Build write the compressed layer to a file in this directory
	// instead of memory: for layers of gigabytes (root disks). The caller removes the directory
	// once the image is written.
	SpoolDir string
	entries  map[string]entry
}

type entry struct {
	mode   fs.FileMode // type bits + permissions
	source string      // host file to copy, for regular files
	data   []byte      // contents, for regular files without a source
	target string      // for symlinks
	// implied marks a parent directory nobody added; an explicit Dir replaces it.
	implied bool
}

// NewLayer returns an empty layer.
func NewLayer(name string) *Layer {
	return &Layer{Name: name, entries: map[string]entry{}}
}

// Dir adds a directory.
func (l *Layer) Dir(p string, perm fs.FileMode) error {
	return l.add(p, entry{mode: fs.ModeDir | perm})
}

// File adds a regular file with the given contents.
func (l *Layer) File(p string, perm fs.FileMode, data []byte) error {
	return l.add(p, entry{mode: perm, data: data})
}

// HostFile adds a regular file copied from src on this machine (symlinks in src are followed).
// The file is read when the layer is written, so it must not change until then.
func (l *Layer) HostFile(p, src string, perm fs.FileMode) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	return l.add(p, entry{mode: perm, source: src})
}

// Symlink adds a symbolic link to target, which is kept as given (absolute targets resolve
// inside the image).
func (l *Layer) Symlink(p, target string) error {
	return l.add(p, entry{mode: fs.ModeSymlink | 0o777, target: target})
}

// Paths lists the layer's entries, sorted, including implied parent directories.
func (l *Layer) Paths() []string {
	ps := make([]string, 0, len(l.entries))
	for p := range l.entries {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

func (l *Layer) add(p string, e entry) error {
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return fmt.Errorf("layer %s: path %q must be absolute and clean, and not /", l.Name, p)
	}
	if old, ok := l.entries[p]; ok {
		if old.implied && e.mode.IsDir() {
			l.entries[p] = e
			return nil
		}
		if sameEntry(old, e) {
			return nil
		}
		return fmt.Errorf("layer %s: %s added twice with different contents (%v and %v)", l.Name, p, old.mode, e.mode)
	}
	// Parents first, so a parent that is already a symlink or a file is reported here.
	// Directories are 0755 unless added with Dir.
	for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
		old, ok := l.entries[dir]
		if !ok {
			l.entries[dir] = entry{mode: fs.ModeDir | 0o755, implied: true}
			continue
		}
		if !old.mode.IsDir() {
			return fmt.Errorf("layer %s: cannot add %s: %s is a %v, not a directory", l.Name, p, dir, old.mode.Type())
		}
	}
	l.entries[p] = e
	return nil
}

func sameEntry(a, b entry) bool {
	return a.mode == b.mode && a.source == b.source && a.target == b.target && string(a.data) == string(b.data)
}

// WriteTar writes the layer as an uncompressed tar: entries sorted by path, owned by root,
// with every timestamp set to mtime.
func (l *Layer) WriteTar(w io.Writer, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, p := range l.Paths() {
		if err := l.writeEntry(tw, p, mtime); err != nil {
			return fmt.Errorf("layer %s: %s: %w", l.Name, p, err)
		}
	}
	return tw.Close()
}

func (l *Layer) writeEntry(tw *tar.Writer, p string, mtime time.Time) error {
	e := l.entries[p]
	// PAX keeps long names and links exact; the fixed mtime has no sub-second part.
	h := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: tarMode(e.mode), ModTime: mtime, Format: tar.FormatPAX}
	switch {
	case e.mode.IsDir():
		h.Typeflag = tar.TypeDir
		h.Name += "/"
		return tw.WriteHeader(h)
	case e.mode&fs.ModeSymlink != 0:
		h.Typeflag = tar.TypeSymlink
		h.Linkname = e.target
		return tw.WriteHeader(h)
	case e.source == "":
		h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(e.data)
		return err
	}
	f, err := os.Open(e.source)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	h.Typeflag, h.Size = tar.TypeReg, fi.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if n, err := io.Copy(tw, newHoleReader(f, h.Size)); err != nil {
		return err
	} else if n != h.Size {
		return fmt.Errorf("%s changed size while being written", e.source)
	}
	return nil
}

// tarMode is the tar header's mode: permission bits plus setuid, setgid and sticky in their
// Unix positions (fs.FileMode keeps those elsewhere).
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// Build turns the layer into a gzip-compressed image layer. The tar is streamed from the
// sources; the compressed bytes are kept in memory, or in a file in SpoolDir, so gzip runs once.
func (l *Layer) Build(mtime time.Time) (v1.Layer, error) {
	if l.SpoolDir != "" {
		return l.spool(mtime)
	}
	opener := func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(l.WriteTar(pw, mtime)) }()
		return pr, nil
	}
	layer, err := tarball.LayerFromOpener(opener, tarball.WithCompressionLevel(gzip.BestCompression), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", l.Name, err)
	}
	return layer, nil
}
