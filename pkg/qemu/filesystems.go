package qemu

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Filesystem is a virtio-fs share: a vhost-user-fs device whose back end, a virtiofsd the runner
// started, listens on Socket; the guest mounts it by Tag.
type Filesystem struct {
	Tag    string
	Socket string
}

// RAMBackend is the id of the guest's boot RAM backend when it is shared (a guest with
// filesystems): virtiofsd maps the guest's memory to read and write the buffers it is given,
// so that memory must be a memfd QEMU shares with it (share=on). Other guests keep QEMU's
// private anonymous RAM.
const RAMBackend = "ram0"

// fsTag is a virtio-fs tag the builder accepts: the device holds 36 bytes, and a plain label
// needs no escaping in an option list.
var fsTag = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,34}[a-z0-9])?$`)

// sharedMemory says the guest's RAM must be visible to other processes (virtiofsd).
func (s Spec) sharedMemory() bool { return len(s.Filesystems) > 0 }

// ramBackendArgs gives a guest with shared memory its boot RAM as a memfd; -machine names it
// (memory-backend=).
func (s Spec) ramBackendArgs() []string {
	if !s.sharedMemory() {
		return nil
	}
	return []string{"-object", fmt.Sprintf("memory-backend-memfd,id=%s,size=%dM,share=on", RAMBackend, s.MemoryMiB)}
}

// filesystemArgs adds one vhost-user-fs device per share, in order. QEMU connects to each
// virtiofsd's socket at start and fails if one is not listening: the runner starts them first.
func (s Spec) filesystemArgs() []string {
	var args []string
	for i, f := range s.Filesystems {
		id := fmt.Sprintf("fs%d", i)
		args = append(args,
			"-chardev", "socket,id="+id+",path="+optValue(f.Socket),
			"-device", "vhost-user-fs-pci,chardev="+id+",tag="+f.Tag,
		)
	}
	return args
}

func (s Spec) validateFilesystems() []error {
	var errs []error
	tags := map[string]bool{}
	for _, f := range s.Filesystems {
		if !fsTag.MatchString(f.Tag) {
			errs = append(errs, fmt.Errorf("filesystem tag %q: use a DNS label of at most 36 characters", f.Tag))
		}
		if tags[f.Tag] {
			errs = append(errs, fmt.Errorf("filesystem tag %q given twice", f.Tag))
		}
		tags[f.Tag] = true
		if f.Socket == "" {
			errs = append(errs, fmt.Errorf("filesystem %s: its virtiofsd's socket is required", f.Tag))
		}
		if strings.ContainsAny(f.Socket, "\x00\n\r") {
			errs = append(errs, fmt.Errorf("filesystem %s: socket contains a NUL or newline", f.Tag))
		}
	}
	if len(s.Filesystems) > 0 && s.IncomingSocket != "" {
		errs = append(errs, errors.New("a guest with filesystems cannot be a migration's target: virtpod does not migrate virtiofsd's state"))
	}
	return errs
}
