package ociimage

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// maxLinks bounds symlink resolution, like the kernel's limit of 40.
const maxLinks = 40

// HostPath copies a file from this machine to the same path in the layer, reproducing every
// symlink met on the way as a symlink: /lib64/ld-linux-x86-64.so.2 on a merged-/usr Debian
// becomes the links /lib64 -> usr/lib64 and /usr/lib64/ld-linux-x86-64.so.2 ->
// /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2, /lib -> usr/lib, and the file itself. Programs
// then find the file in the image under every name they know it by on the host.
// Directories on the way keep their host permissions. It returns the resolved (real) path.
func (l *Layer) HostPath(p string) (string, error) {
	return l.hostPath("", p, 0)
}

// HostPathIn is HostPath for a file of another system's root tree on this machine (Debian 13's
// QEMU built by mmdebstrap, say): p and the links met on the way are that system's, resolved
// inside root (an absolute link target is root's, not this machine's), and the file lands at p in
// the layer. It returns the resolved path inside root.
func (l *Layer) HostPathIn(root, p string) (string, error) {
	if !filepath.IsAbs(root) {
		return "", fmt.Errorf("root %q is not absolute", root)
	}
	return l.hostPath(root, p, 0)
}

func (l *Layer) hostPath(root, p string, links int) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("host path %q is not absolute", p)
	}
	parts := strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/")
	cur := "/"
	for i, part := range parts {
		next := path.Join(cur, part)
		fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(next)))
		if err != nil {
			return "", err
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			if links >= maxLinks {
				return "", fmt.Errorf("%s: too many levels of symbolic links", p)
			}
			target, err := os.Readlink(filepath.Join(root, filepath.FromSlash(next)))
			if err != nil {
				return "", err
			}
			if err := l.Symlink(next, target); err != nil {
				return "", err
			}
			if !path.IsAbs(target) {
				target = path.Join(cur, target)
			}
			return l.hostPath(root, path.Join(append([]string{target}, parts[i+1:]...)...), links+1)
		case fi.IsDir():
			if err := l.Dir(next, fi.Mode().Perm()); err != nil {
				return "", err
			}
		case fi.Mode().IsRegular() && i == len(parts)-1:
			return next, l.HostFile(next, filepath.Join(root, filepath.FromSlash(next)), fi.Mode().Perm())
		default:
			return "", fmt.Errorf("%s: %s is a %v, want a directory, regular file or symlink", p, next, fi.Mode().Type())
		}
		cur = next
	}
	return "", fmt.Errorf("%s is a directory, want a file", p)
}
