package guestnet

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs f on a thread that has joined the network namespace nsfd refers to (setns, which
// takes CAP_SYS_ADMIN: the node agent's). The thread is never given back: Go ends a thread whose
// goroutine exits while locked to it, so nothing else ever runs in the pod's namespace by
// accident. Everything f does must happen on its own goroutine: netlink and nftables sockets
// opened there belong to the namespace.
func InNetns(nsfd int, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("joining the pod's network namespace: %w (the node agent needs CAP_SYS_ADMIN; the descriptor must be a network namespace)", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}
