package qemu

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// VideoID is the display card's device id: QMP's screendump captures it.
const VideoID = "video0"

// displayArgs gives a guest with a VNCSocket QEMU's standard VGA card (what SeaBIOS, OVMF,
// Linux's vgacon and bochs-drm all drive) and serves its screen over VNC on that unix socket
// only: "unix:" takes the rest as the path, so no value names a TCP display. The card comes
// after every other device but the hotplug slots (which follow it for the same reason), so a
// guest that gains it keeps its other devices' PCI slots (and
// the interface names a distribution derives from them). Its video memory is pinned at what
// the runner pod budgets for it, whatever a QEMU's default. -display none stays: QEMU opens
// no window of its own.
func (s Spec) displayArgs() []string {
	if s.VNCSocket == "" {
		return nil
	}
	return []string{
		"-device", "VGA,id=" + VideoID + ",vgamem_mb=" + strconv.Itoa(vmv1.DisplayOverheadMiB),
		"-vnc", "unix:" + optValue(s.VNCSocket),
	}
}

func (s Spec) validateDisplay() []error {
	p := s.VNCSocket
	switch {
	case p == "":
		return nil
	case !filepath.IsAbs(p):
		return []error{errors.New("VNC socket: must be an absolute path")}
	case len(p) > maxSocketPath:
		return []error{errors.New("VNC socket: longer than a unix socket path can be (107 bytes); use a shorter state directory")}
	case strings.ContainsAny(p, "\x00\n\r"):
		return []error{errors.New("VNC socket contains a NUL or newline")}
	}
	return nil
}
