package podcontrol

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// WriteFile creates the file name in the directory with data, readable by the runner's user
// alone. It never follows a link and never writes a file that is there already: a pod can
// plant names in its directory, so O_EXCL beneath the directory's descriptor is the only safe
// way for the agent, root on the node, to write there.
func (c Control) WriteFile(name string, data []byte) error {
	if filepath.Base(name) != name {
		return fmt.Errorf("file name %q: a name, not a path", name)
	}
	dir, err := c.openDir()
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return c.refusal(c.Device, name, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(c.String(), name))
	defer f.Close()
	if err := unix.Fchown(fd, int(vmv1.RunnerUID), int(vmv1.RunnerGID)); err != nil {
		return fmt.Errorf("making %s the runner's user's: %w", f.Name(), err)
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Sync()
}
