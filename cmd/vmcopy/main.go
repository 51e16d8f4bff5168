// Command vmcopy is the copy program every VM image made by `imagebuild vm` carries at
// /virtpod/bin/vmcopy. On clusters without image volumes the runner pod's init containers run
// the VM image itself with it, unprivileged, to copy the kernel and disk into emptyDirs:
//
//	/virtpod/bin/vmcopy /boot /virtpod/images/kernel/boot
//	/virtpod/bin/vmcopy /disk /virtpod/images/disk/disk
//
// It copies the regular files of SRC_DIR recursively into DST_DIR, keeping their permissions and
// skipping runs of zero blocks (pkg/disk/sparsecopy), fsyncs them, and exits non-zero on any failure.
// It is static: VM images have no libc.
package main

import (
	"fmt"
	"os"

	"github.com/virtpod/virtpod/pkg/disk/sparsecopy"
)

func main() {
	if len(os.Args) != 3 || os.Args[1] == "" || os.Args[2] == "" {
		fmt.Fprintln(os.Stderr, "usage: vmcopy SRC_DIR DST_DIR\n"+
			"copies the regular files of SRC_DIR into DST_DIR, sparse, keeping permissions")
		os.Exit(2)
	}
	st, err := sparsecopy.Tree(os.Args[1], os.Args[2], os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmcopy: copying %s to %s: %v\n", os.Args[1], os.Args[2], err)
		os.Exit(1)
	}
	fmt.Printf("vmcopy: %d files, %.1f MiB, %.1f MiB written\n", st.Files, float64(st.Bytes)/(1<<20), float64(st.Written)/(1<<20))
}
