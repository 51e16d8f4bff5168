package podcontrol

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// WriteFile creates the file name in the directory with data, readable by the runner's user
// alone. It never follows a link and never writes a file that is there already: a pod can
// plant names in its directory, so O_EXCL beneath the directory's descriptor is the only safe
// way for the agent, root on the node, to write there. The file appears whole: it is written
// under a hidden name of its own and renamed into place (never over anything there), since the
// pod may be polling for it and takes what it reads first.
func (c Control) WriteFile(name string, data []byte) error {
	if filepath.Base(name) != name || name == "." || name == ".." {
		return fmt.Errorf("file name %q: a name, not a path", name)
	}
	dir, err := c.openDir()
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	tmp := "." + name + "." + hex.EncodeToString(suffix[:])
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return c.refusal(c.Device, tmp, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(c.String(), name)) // named, in errors, as it will be
	err = fill(f, data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = publish(dir, tmp, name)
		if err != nil {
			err = &os.PathError{Op: "create", Path: filepath.Join(c.String(), name), Err: err}
		}
	}
	if err != nil {
		// Ours: made with O_EXCL, under a name the pod could not foresee.
		_ = unix.Unlinkat(dir, tmp, 0)
	}
	return err
}

// fill makes f the runner's user's and writes data in it.
func fill(f *os.File, data []byte) error {
	if err := unix.Fchown(int(f.Fd()), int(vmv1.RunnerUID), int(vmv1.RunnerGID)); err != nil {
		return fmt.Errorf("making %s the runner's user's: %w", f.Name(), err)
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Sync()
}

// publish gives file tmp in dir the name name, failing (EEXIST) when anything, a symlink
// included, has that name: rename(2) and link(2) never follow a link in their last component.
// A file system without RENAME_NOREPLACE gets a hard link, then tmp's removal.
func publish(dir int, tmp, name string) error {
	err := unix.Renameat2(dir, tmp, dir, name, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		return err
	}
	if err := unix.Linkat(dir, tmp, dir, name, 0); err != nil {
		return err
	}
	return unix.Unlinkat(dir, tmp, 0)
}
