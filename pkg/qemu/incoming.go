package qemu

import (
	"errors"
	"fmt"
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

// incomingRAM is the name QEMU gives a q35 guest's boot RAM when -m makes it: a target that
// makes its RAM itself keeps the name, which the stream addresses the RAM by.
const incomingRAM = "pc.ram"

// incomingRAMArgs allocates an arriving guest's boot RAM up front, at QEMU's start, before the
// stream comes: each page's first touch (a fault, on a fragmented host a huge page's
// compaction) would otherwise happen while the guest is stopped, in the downtime of a migration
// (the last pass under KVM, the whole copy under TCG) or a resume. A 256 MiB guest's paused copy
// took 3.2 s with the faults in it and 0.14 s without (docs/benchmarks.md). The pod reserves
// the whole guest already; one thread per vCPU fills it (the pod's CPU allows that many), and
// x-use-canonical-path-for-ramblock-id=off keeps the RAM block named as -m names it.
func (s Spec) incomingRAMArgs() []string {
	if s.IncomingSocket == "" || s.sharedMemory() {
		return nil
	}
	return []string{"-object", fmt.Sprintf("memory-backend-ram,id=%s,size=%dM,prealloc=on,prealloc-threads=%d,x-use-canonical-path-for-ramblock-id=off",
		incomingRAM, s.MemoryMiB, max(s.CPUs, 1))}
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
