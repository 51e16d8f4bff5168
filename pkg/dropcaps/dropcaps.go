// Package dropcaps replaces a process with a command that holds no capability and can gain
// none: how the runner starts QEMU, and how the node agent starts the child that unpacks a
// pod's kernel.
package dropcaps

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Exec replaces the current process with argv after giving up every capability for good:
// no_new_privs first, so execve cannot hand root's capabilities back, then the ambient,
// effective, permitted and inheritable sets emptied. The runner pod holds none (the node agent
// plumbs the guest's network), so for QEMU this is a second fence: were the runner run with
// some, QEMU, which gets the tap as an open file descriptor and opens only files it owns and
// /dev/kvm, still gets none. Capabilities and no_new_privs belong to a thread, so everything
// happens on one locked thread, the one that calls execve. Open descriptors without
// close-on-exec pass to argv.
func Exec(argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("exec-unprivileged: no command")
	}
	runtime.LockOSThread() // never unlocked: on success the process is replaced
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("exec-unprivileged: no_new_privs: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("exec-unprivileged: clearing ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("exec-unprivileged: dropping capabilities: %w", err)
	}
	return unix.Exec(argv[0], argv, os.Environ())
}

// Held says whether the calling thread holds any effective capability.
func Held() (bool, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false, err
	}
	return data[0].Effective|data[1].Effective != 0, nil
}
