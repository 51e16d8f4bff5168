// Command pause is the local cluster's sandbox ("pause") container: it holds the pod's
// namespaces open and exits 0 on SIGTERM or SIGINT. It does not reap zombies: virtpod's pods do
// not share their PID namespace.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	os.Exit(0)
}
