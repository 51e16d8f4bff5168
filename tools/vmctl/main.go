// Command vmctl shows which virtpod providers can run VMs where, and why not elsewhere, and
// lets admins enable or disable a provider class. Installed as kubectl-virtpod it is the
// kubectl plugin `kubectl virtpod`.
package main

import (
	"os"

	"github.com/virtpod/virtpod/tools/vmctl/internal/vmctl"
)

func main() {
	os.Exit(vmctl.Run(os.Args, os.Stdout, os.Stderr))
}
