package podcontrol

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// LinkSocket hard-links socket name of c into dst's directory as as, replacing whatever is
// there: a disk hotplugged into a running guest is served by an attachment pod's qemu-nbd, and
// the link lets the runner's QEMU connect to it directly, so the agent is out of the data path
// and its restart breaks nothing. As everywhere here, no path of a pod's reaches the kernel: the
// source is the O_PATH descriptor openSocket checked (linkat through /proc/self/fd links that
// very inode), the destination a name beneath dst's descriptor, made under a temporary name and
// renamed over as, so whatever the runner's container planted there (a file, a symlink) is
// replaced, never followed. Linking the same socket again does nothing.
func (c Control) LinkSocket(name string, dst Control, as string) error {
	if err := plainName(name); err != nil {
		return err
	}
	if err := plainName(as); err != nil {
		return err
	}
	src, err := c.openSocket(name)
	if err != nil {
		return err
	}
	defer src.Close()
	dir, err := dst.openDir()
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	var have, want unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &want); err != nil {
		return err
	}
	if unix.Fstatat(dir, as, &have, unix.AT_SYMLINK_NOFOLLOW) == nil && have.Dev == want.Dev && have.Ino == want.Ino {
		return nil
	}
	path := filepath.Join(dst.String(), as)
	tmp := ".link-" + as
	if err := unix.Unlinkat(dir, tmp, 0); err != nil && err != unix.ENOENT { // an agent that died midway
		return &os.PathError{Op: "remove", Path: filepath.Join(dst.String(), tmp), Err: err}
	}
	if err := linkInode(src, dir, tmp); err != nil {
		return fmt.Errorf("linking %s as %s: %w", src.Name(), path, err)
	}
	if err := unix.Renameat(dir, tmp, dir, as); err != nil {
		_ = unix.Unlinkat(dir, tmp, 0)
		return &os.PathError{Op: "rename", Path: path, Err: err}
	}
	return nil
}

// linkInode links src's inode as name in dir. The kernel's fs.protected_hardlinks lets only a
// socket's owner, or CAP_FOWNER, link it; without that, the agent makes the socket its own for
// the link (CAP_CHOWN) and then the runner's user's (the attachment pod's, whose qemu-nbd made
// it, and the runner's, whose QEMU connects to it), through the same O_PATH descriptor.
func linkInode(src *os.File, dir int, name string) error {
	fd := int(src.Fd())
	proc := "/proc/self/fd/" + strconv.Itoa(fd)
	err := unix.Linkat(unix.AT_FDCWD, proc, dir, name, unix.AT_SYMLINK_FOLLOW)
	if err != unix.EPERM {
		return err
	}
	if err := unix.Fchownat(fd, "", os.Geteuid(), -1, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("%w (and taking the socket for the link: %v)", unix.EPERM, err)
	}
	err = unix.Linkat(unix.AT_FDCWD, proc, dir, name, unix.AT_SYMLINK_FOLLOW)
	if cerr := unix.Fchownat(fd, "", int(vmv1.RunnerUID), int(vmv1.RunnerGID), unix.AT_EMPTY_PATH); err == nil && cerr != nil {
		_ = unix.Unlinkat(dir, name, 0)
		err = fmt.Errorf("giving the socket back to the runner's user: %w", cerr)
	}
	return err
}

// Remove removes socket name from the directory: a link LinkSocket made. Nothing there is done
// already; anything but a socket is refused and left alone. unlinkat never follows a link.
func (c Control) Remove(name string) error {
	if err := plainName(name); err != nil {
		return err
	}
	dir, err := c.openDir()
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	path := filepath.Join(c.String(), name)
	var st unix.Stat_t
	switch err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == unix.ENOENT:
		return nil
	case err != nil:
		return &os.PathError{Op: "stat", Path: path, Err: err}
	case st.Mode&unix.S_IFMT != unix.S_IFSOCK:
		return fmt.Errorf("%s is not a socket: %w", path, ErrRefused)
	}
	if err := unix.Unlinkat(dir, name, 0); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "remove", Path: path, Err: err}
	}
	return nil
}

// plainName refuses a path where a name in the directory is asked for.
func plainName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("%q: a name in the control directory, not a path: %w", name, ErrRefused)
	}
	return nil
}
