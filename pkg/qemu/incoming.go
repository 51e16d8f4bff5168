package qemu

import (
	"errors"
	"path/filepath"
	"strings"
)

// maxSocketPath is the longest path a unix socket can have (sun_path, with its NUL).
const maxSocketPath = 107

// incomingArgs makes QEMU a live migration's target, which loads the guest from a stream
// instead of booting it: "-incoming defer", so it listens only when told to (QMP
// migrate-incoming on IncomingURI), once the disks the source mirrors onto are served. A
// source that found the memory socket before the NBD one would fail its first mirror (libvirt
// orders it the same way).
func (s Spec) incomingArgs() []string {
	if s.IncomingSocket == "" {
		return nil
	}
	return []string{"-incoming", "defer"}
}

// IncomingURI is where the target listens, for migrate-incoming. "unix:" takes the rest of the
// value as the path verbatim (no option list), and the path is absolute, so no value can name
// another transport (tcp:, exec:) or carry an option of its own.
func (s Spec) IncomingURI() string { return "unix:" + s.IncomingSocket }

func (s Spec) validateIncoming() []error {
	p := s.IncomingSocket
	switch {
	case p == "":
		return nil
	case !filepath.IsAbs(p):
		return []error{errors.New("incoming socket: must be an absolute path")}
	case len(p) > maxSocketPath:
		return []error{errors.New("incoming socket: longer than a unix socket path can be (107 bytes); use a shorter control directory")}
	case strings.ContainsAny(p, "\x00\n\r"):
		return []error{errors.New("incoming socket contains a NUL or newline")}
	}
	return nil
}
