// Package netnstest runs a test's network code in a network namespace of its own.
package netnstest

import (
	"runtime"

	"github.com/vishvananda/netns"
)

// Run calls f on a thread moved into a new, empty network namespace and returns f's error, or
// the namespace's. The thread is never unlocked, so it ends with its goroutine and takes the
// namespace with it: nothing f sets up outlives the call or leaks into another goroutine. f
// reports what it saw through its closure; Run returns only after f did (needs root).
func Run(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := netns.New()
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		errc <- f()
	}()
	return <-errc
}
