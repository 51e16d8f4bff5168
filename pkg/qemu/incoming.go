package qemu

import (
	"errors"
	"path/filepath"
	"strings"
)

// maxSocketPath is the longest path a unix socket can have (sun_path, with its NUL).
const maxSocketPath = 107

// incomingArgs makes QEMU a live migration's target: it listens on the unix socket and loads
// the guest from the stream instead of booting it. -incoming's "unix:" takes the rest of its
// value as the path verbatim (no option list), and the path is absolute, so no value can name
// another transport (tcp:, exec:) or become an option of its own.
func (s Spec) incomingArgs() []string {
	if s.IncomingSocket == "" {
		return nil
	}
	return []string{"-incoming", "unix:" + s.IncomingSocket}
}

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
