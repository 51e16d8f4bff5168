package hypervisor

import (
	"context"
	"errors"
	"path/filepath"
)

// VNCSocketName is the guest's screen, served over VNC, in the runner's state directory.
const VNCSocketName = "vnc.sock"

// VNCSocket is where a runner with state directory stateDir serves the guest's screen: the
// hypervisor listens there, and `virtpod-runner vnc` connects to it.
func VNCSocket(stateDir string) string { return filepath.Join(stateDir, VNCSocketName) }

// ErrNoDisplay: the guest has no display (--display=none).
var ErrNoDisplay = errors.New("the guest has no display (--display=none): the VM's spec.guest.display is None, or its runner pod was made before displays")

// Screen is a hypervisor whose guest can have a display.
type Screen interface {
	// Screendump writes what the guest's display shows now to the file at path, as a binary
	// PPM (P6, 8 bits a channel). ErrNoDisplay when the guest has none, ErrNotRunning before
	// the hypervisor runs or after it ended.
	Screendump(ctx context.Context, path string) error
}
