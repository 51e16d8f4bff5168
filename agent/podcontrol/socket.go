package podcontrol

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// A runner's container can write its control directory: it may replace any socket there with
// a symlink to another pod's (../controlK/runner.sock) or to a file of the node. So the agent
// never hands a control-directory path to the kernel as a path: it resolves names with openat2
// beneath the directory's descriptor, refusing every symlink, checks the result is a socket,
// and connects to that very inode through /proc/self/fd.

// ErrRefused is in every error for a link, or anything but a socket, where a socket should be.
var ErrRefused = errors.New("refused")

// Control is one pod's control directory: Device beneath Root (the agent's view of
// vmv1.HostControlDir).
type Control struct {
	Root   string
	Device string
}

// String is the directory's path, for messages.
func (c Control) String() string { return filepath.Join(c.Root, c.Device) }

// resolve is openat2's answer: never a symlink, never out of the starting directory.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openDir opens the pod's directory (O_PATH): Root is the admin's mount; Device, from the
// kubelet, is resolved beneath it without links.
func (c Control) openDir() (int, error) {
	root, err := unix.Open(c.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: c.Root, Err: err}
	}
	defer unix.Close(root)
	fd, err := openat2(root, c.Device, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return -1, c.refusal(c.Device, "", err)
	}
	return fd, nil
}

func openat2(dir int, name string, flags uint64) (int, error) {
	for {
		fd, err := unix.Openat2(dir, name, &unix.OpenHow{Flags: flags, Resolve: resolve})
		if err != unix.EINTR && err != unix.EAGAIN {
			return fd, err
		}
	}
}

// refusal names what was refused; ELOOP and EXDEV are openat2's answers to a link.
func (c Control) refusal(name, sub string, err error) error {
	path := filepath.Join(c.Root, name, sub)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return fmt.Errorf("%s is or passes through a symlink, or leaves the control directory: %w (the agent follows no link there)", path, ErrRefused)
	}
	return &os.PathError{Op: "open", Path: path, Err: err}
}

// openSocket opens name in the directory as O_PATH and checks that it is a socket.
func (c Control) openSocket(name string) (*os.File, error) {
	dir, err := c.openDir()
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	fd, err := openat2(dir, name, unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		return nil, c.refusal(c.Device, name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		return nil, fmt.Errorf("%s is not a socket: %w", filepath.Join(c.String(), name), ErrRefused)
	}
	return os.NewFile(uintptr(fd), filepath.Join(c.String(), name)), nil
}

// IsSocket says whether name is there, a socket, reached without a link.
func (c Control) IsSocket(name string) bool {
	f, err := c.openSocket(name)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// WaitSocket waits, at most within, until IsSocket(name): a pod's server that makes its socket
// once it serves.
func (c Control) WaitSocket(ctx context.Context, name string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !c.IsSocket(name) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: no socket within %s: %w", filepath.Join(c.String(), name), within, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// Dial connects to the socket name in the directory, refusing links and anything but a socket.
// connect(2) on /proc/self/fd/N reaches the inode the O_PATH descriptor holds, so nothing
// swapped in after the check is reached instead.
func (c Control) Dial(ctx context.Context, name string) (net.Conn, error) {
	f, err := c.openSocket(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(int(f.Fd())))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", f.Name(), err)
	}
	return conn, nil
}

// HTTPClient speaks HTTP to the socket name in the directory (the runner's control API), each
// connection opened with Dial; timeout 0 is none.
func (c Control) HTTPClient(name string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return c.Dial(ctx, name) },
	}}
}

// Listen makes socket name in the directory, mode 0600 and owned by the runner's user
// (vmv1.RunnerUID, whose QEMU connects to it), and listens on it. A socket left there (an agent
// that died) is replaced; anything else there, a symlink above all, is refused. Closing the
// listener removes the socket.
func (c Control) Listen(name string) (net.Listener, error) {
	if filepath.Base(name) != name {
		return nil, fmt.Errorf("socket name %q: a name, not a path", name)
	}
	dir, err := c.openDir()
	if err != nil {
		return nil, err
	}
	l, err := c.listen(dir, name)
	if err != nil {
		unix.Close(dir)
		return nil, err
	}
	return l, nil
}

func (c Control) listen(dir int, name string) (net.Listener, error) {
	path := filepath.Join(c.String(), name)
	var st unix.Stat_t
	switch err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && st.Mode&unix.S_IFMT != unix.S_IFSOCK:
		return nil, fmt.Errorf("%s is there and not a socket (a symlink?): %w", path, ErrRefused)
	case err == nil:
		if err := unix.Unlinkat(dir, name, 0); err != nil && err != unix.ENOENT {
			return nil, &os.PathError{Op: "remove", Path: path, Err: err}
		}
	case err != unix.ENOENT:
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	// bind(2) through the directory's descriptor: the pod cannot move it, and bind never
	// follows a link in the last component (it fails on anything there).
	l, err := net.ListenUnix("unix", &net.UnixAddr{Net: "unix", Name: "/proc/self/fd/" + strconv.Itoa(dir) + "/" + name})
	if err != nil {
		return nil, fmt.Errorf("listening on %s (is the node's control directory mounted writable?): %w", path, err)
	}
	// Its path names a descriptor number that may be another file's after Close.
	l.SetUnlinkOnClose(false)
	sl := &listener{UnixListener: l, dir: dir, name: name}
	// Through the very inode's O_PATH descriptor: nothing swapped in meanwhile is changed.
	f, err := c.openSocket(name)
	if err == nil {
		err = os.Chmod("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), 0o600)
		if err == nil {
			err = unix.Fchownat(int(f.Fd()), "", int(vmv1.RunnerUID), int(vmv1.RunnerGID), unix.AT_EMPTY_PATH)
		}
		f.Close()
	}
	if err != nil {
		sl.Close()
		return nil, fmt.Errorf("making %s the runner's user's alone (the node agent needs CAP_CHOWN): %w", path, err)
	}
	return sl, nil
}

// listener holds the directory open so that Close removes the socket from it.
type listener struct {
	*net.UnixListener
	once sync.Once
	dir  int
	name string
}

func (l *listener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() {
		// unlinkat never follows a link: at worst the pod's own planted name goes.
		_ = unix.Unlinkat(l.dir, l.name, 0)
		unix.Close(l.dir)
	})
	return err
}
