package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/diskcopy"
)

// diskServeCommand serves one hotplugged disk over NBD to a running guest (an attachment pod).
func diskServeCommand(code *int) *cobra.Command {
	var controlDir, disk, stateDir, qemuNBD, terminationLog string
	c := &cobra.Command{
		Use:   "disk-serve --control-dir DIR --disk name=NAME,kind=KIND,path=PATH[,size-mib=N][,readonly]",
		Short: "Serve one disk over NBD to a running guest until stopped (a hotplugged disk's attachment pod)",
		Long: `Serve one disk over NBD to a running guest until stopped (docs/hotplug.md).

The disk is readied as the runner readies a disk of its own: kind file is a claim's folder whose
` + runnerconfig.DiskFileName + ` is made sparse at size-mib (0: the volume's size) when absent and kept otherwise;
block a device; empty a folder where a blank ` + runnerconfig.DiskFileName + ` of size-mib is made; files a folder of
a mounted ConfigMap or Secret, written to a read-only ISO in --state-dir. Then qemu-nbd serves
it on DIR/` + controlapi.AttachmentSocket + `, export NAME, raw, one client at a time, persistent (the guest's
QEMU may reconnect), read-only with readonly. The socket appears once qemu-nbd serves: the node
agent links it into the runner's control directory.

Exit 0: stopped by SIGTERM or SIGINT, qemu-nbd stopped and a writable disk synced; 1: qemu-nbd
or readying the disk failed (the reason on stderr and in --termination-log); 2: refused before
anything was written.`,
		Example: `  virtpod-runner disk-serve --control-dir=` + vmv1.ControlDir + ` \
    --disk=name=data,kind=file,path=/virtpod/disks/data,size-mib=10240`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			*code = runDiskCopier("disk-serve", terminationLog, func(ctx context.Context, log *zap.Logger) error {
				d, err := diskcopy.ParseServeDisk(disk)
				if err != nil {
					return err
				}
				return diskcopy.Serve(ctx, controlDir, d, diskcopy.ServeOptions{QEMUNBD: qemuNBD, StateDir: stateDir, Log: log})
			})
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&controlDir, "control-dir", "", "the pod's control directory, which the node agent reaches: the NBD socket "+controlapi.AttachmentSocket+" goes there (required)")
	f.StringVar(&disk, "disk", "", "the disk, name=NAME,kind=file|block|empty|files,path=PATH[,size-mib=N][,readonly], as the runner's --disk (required)")
	f.StringVar(&stateDir, "state-dir", "", "a writable folder for a files disk's ISO")
	f.StringVar(&qemuNBD, "qemu-nbd-binary", os.Getenv(diskcopy.EnvQEMUNBD), "path of "+diskcopy.QEMUNBDName+" (env "+diskcopy.EnvQEMUNBD+"; default: next to qemu-img, "+diskcopy.QEMUNBD+", or on PATH)")
	f.StringVar(&terminationLog, "termination-log", "/dev/termination-log", "file the exit reason is written to (the container's terminationMessagePath)")
	return c
}
