package rootdisk

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// extractor unpacks a root filesystem tarball into a directory that mkfs.ext4 -d then copies.
// What an extraction without root cannot give a file (an owner other than ours, a device node,
// security xattrs), and whatever else ends up differing from the tarball, is written down as
// debugfs commands applied to the new file system. So there is one code path whether or not
// imagebuild runs as root; as root the list is short (other owners, devices, xattrs).
type extractor struct {
	root   string // the extracted tree
	values string // xattr values, one file each, for debugfs ea_set -f
	cmds   []string
	dirs   map[string]*tar.Header // finished last: a read-only directory must stay writable until then
	// Bytes and Files count what the tarball holds, for the --disk-size hint.
	Bytes int64
	Files int
}

// modeBits are the parts of a tar entry's mode chmod sets.
const modeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

func newExtractor(root, values string) *extractor {
	e := &extractor{root: root, values: values, dirs: map[string]*tar.Header{}}
	e.dirs[""] = impliedDir("")
	return e
}

// impliedDir is a directory the tarball does not list but has entries in (the root, too, when
// there is no "./" entry): root's, mode 0755, as tar itself would make it when extracting as root.
func impliedDir(name string) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}
}

// extract reads a tar stream, plain or gzip-compressed.
func (e *extractor) extract(r io.Reader) error {
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer gz.Close()
		r = gz
	} else {
		r = br
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if err := e.entry(h, tr); err != nil {
			return fmt.Errorf("tar entry %q: %w", h.Name, err)
		}
	}
	return e.finishDirs()
}

// entryPath turns a tar name into a clean path relative to the root ("" is the root itself),
// refusing names that climb out of it and layer whiteouts.
func entryPath(name string) (string, error) {
	rel := strings.Trim(name, "/")
	for _, part := range strings.Split(rel, "/") {
		if part == ".." {
			return "", errors.New("the path leaves the root: refusing it")
		}
		if strings.HasPrefix(part, ".wh.") {
			return "", errors.New("an image layer whiteout: pass a flattened root filesystem (docker export, or a container's filesystem), not one layer")
		}
	}
	rel = path.Clean("/" + rel)[1:]
	return rel, nil
}

func (e *extractor) entry(h *tar.Header, r io.Reader) error {
	if h.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := entryPath(h.Name)
	if err != nil {
		return err
	}
	e.Files++
	if name == "" {
		if h.Typeflag != tar.TypeDir {
			return errors.New("the root is not a directory")
		}
		e.dirs[""] = h
		return nil
	}
	p := filepath.Join(e.root, name)
	if err := e.parents(name); err != nil {
		return err
	}
	// A later entry replaces an earlier one, as in a layer; a directory stays and is updated.
	if fi, err := os.Lstat(p); err == nil && !(fi.IsDir() && h.Typeflag == tar.TypeDir) {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		e.dirs[name] = h
		if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		return nil
	case tar.TypeReg:
		e.Bytes += h.Size
		if err := writeFile(p, r); err != nil {
			return err
		}
	case tar.TypeLink:
		target, err := entryPath(h.Linkname)
		if err != nil || target == "" {
			return fmt.Errorf("hard link to %q: not a file inside the root", h.Linkname)
		}
		if err := e.parents(target); err != nil {
			return err
		}
		if err := os.Link(filepath.Join(e.root, target), p); err != nil {
			return fmt.Errorf("hard link to %q, which must come earlier in the tarball: %w", h.Linkname, err)
		}
		return nil // the target's entry has the metadata
	case tar.TypeSymlink:
		if err := os.Symlink(h.Linkname, p); err != nil {
			return err
		}
	case tar.TypeFifo:
		if err := unix.Mkfifo(p, 0o600); err != nil {
			return fmt.Errorf("mkfifo %s: %w", p, err)
		}
	case tar.TypeChar, tar.TypeBlock:
		// Never made here (that needs CAP_MKNOD): debugfs adds it to the file system.
		return e.node(name, h)
	default:
		return fmt.Errorf("unsupported type %q", h.Typeflag)
	}
	if h.Typeflag != tar.TypeSymlink {
		if err := os.Chmod(p, h.FileInfo().Mode()&modeBits); err != nil {
			return err
		}
	}
	if err := setTimes(p, h.ModTime); err != nil {
		return err
	}
	return e.fixup(name, h)
}

// parents makes sure every directory above name is a real directory inside the root, so no
// entry is written through a symlink to somewhere outside it.
func (e *extractor) parents(name string) error {
	dir := e.root
	parts := strings.Split(name, "/")
	for _, part := range parts[:len(parts)-1] {
		dir = filepath.Join(dir, part)
		fi, err := os.Lstat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			rel := strings.TrimPrefix(dir, e.root+"/")
			if _, listed := e.dirs[rel]; !listed {
				e.dirs[rel] = impliedDir(rel)
			}
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("goes through the symlink /%s: refusing to write through it", strings.TrimPrefix(dir, e.root+"/"))
		case !fi.IsDir():
			return fmt.Errorf("/%s is not a directory", strings.TrimPrefix(dir, e.root+"/"))
		}
	}
	return nil
}

func writeFile(p string, r io.Reader) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func setTimes(p string, mtime time.Time) error {
	ts := unix.NsecToTimespec(mtime.UnixNano())
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times of %s: %w", p, err)
	}
	return nil
}

// finishDirs gives directories their modes and times, deepest first, once nothing more is
// written into them.
func (e *extractor) finishDirs() error {
	names := make([]string, 0, len(e.dirs))
	for n := range e.dirs {
		names = append(names, n)
	}
	slices.Sort(names)
	slices.Reverse(names)
	for _, name := range names {
		h := e.dirs[name]
		p := filepath.Join(e.root, name)
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue // replaced by a later entry
		}
		if err := os.Chmod(p, h.FileInfo().Mode()&modeBits); err != nil {
			return err
		}
		if err := setTimes(p, h.ModTime); err != nil {
			return err
		}
		if err := e.fixup(name, h); err != nil {
			return fmt.Errorf("tar entry %q: %w", h.Name, err)
		}
	}
	return nil
}

// fixup compares what is on disk at name with the tar header and records debugfs commands for
// each difference: owner, group, mode (a kernel may drop setgid), and xattrs.
func (e *extractor) fixup(name string, h *tar.Header) error {
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(e.root, name), &st); err != nil {
		return err
	}
	return e.setMeta(name, h, st.Uid, st.Gid, st.Mode)
}

// setMeta records the commands that turn an inode with uid, gid and raw mode into what h says.
func (e *extractor) setMeta(name string, h *tar.Header, uid, gid, mode uint32) error {
	q, err := quote("/" + name)
	var cmds []string
	if uint32(h.Uid) != uid {
		cmds = append(cmds, fmt.Sprintf("sif %s uid %d", q, h.Uid))
	}
	if uint32(h.Gid) != gid {
		cmds = append(cmds, fmt.Sprintf("sif %s gid %d", q, h.Gid))
	}
	if want := uint32(h.Mode) & 0o7777; h.Typeflag != tar.TypeSymlink && mode&0o7777 != want {
		cmds = append(cmds, fmt.Sprintf("sif %s mode 0%o", q, mode&unix.S_IFMT|want))
	}
	xattrs := xattrNames(h)
	for _, x := range xattrs {
		vf := filepath.Join(e.values, strconv.Itoa(len(e.cmds)+len(cmds)))
		if err := os.WriteFile(vf, []byte(h.PAXRecords["SCHILY.xattr."+x]), 0o600); err != nil {
			return err
		}
		qv, verr := quote(vf)
		qx, xerr := quote(x)
		if err = errors.Join(err, verr, xerr); err == nil {
			cmds = append(cmds, fmt.Sprintf("ea_set -f %s %s %s", qv, q, qx))
		}
	}
	if len(cmds) == 0 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("needs its owner, mode or xattrs set after mkfs, and %w", err)
	}
	e.cmds = append(e.cmds, cmds...)
	return nil
}

// node records a device node: debugfs's mknod takes a name in its current directory.
func (e *extractor) node(name string, h *tar.Header) error {
	dir, base := path.Split("/" + name)
	qd, err1 := quote(dir)
	qb, err2 := quote(base)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("a device node made with debugfs, and %w", err)
	}
	kind, typ := "c", uint32(unix.S_IFCHR)
	if h.Typeflag == tar.TypeBlock {
		kind, typ = "b", unix.S_IFBLK
	}
	e.cmds = append(e.cmds, "cd "+qd, fmt.Sprintf("mknod %s %s %d %d", qb, kind, h.Devmajor, h.Devminor), "cd /")
	// debugfs makes it owned by root with no permissions.
	return e.setMeta(name, h, 0, 0, typ)
}

func xattrNames(h *tar.Header) []string {
	var names []string
	for k := range h.PAXRecords {
		if x, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			names = append(names, x)
		}
	}
	slices.Sort(names)
	return names
}

// quote makes s one debugfs argument. debugfs's parser has no escape for a double quote or a
// line break, so names with those cannot be given to it.
func quote(s string) (string, error) {
	if strings.ContainsAny(s, "\"\n\r") {
		return "", fmt.Errorf("%q has a double quote or line break, which debugfs cannot take", s)
	}
	return `"` + s + `"`, nil
}
