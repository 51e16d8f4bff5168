package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/virtpod/virtpod/runner"
	"github.com/virtpod/virtpod/runner/diskcopy"
)

// The programs of a VirtualMachineSnapshot's copier pod (runner/diskcopy).

// diskTargetCommand serves a snapshot's disk files over NBD for the running VM's QEMU to push
// its backup into.
func diskTargetCommand(code *int) *cobra.Command {
	var controlDir, qemuNBD, terminationLog string
	var targets []string
	c := &cobra.Command{
		Use:   "disk-target --control-dir DIR --target drive=ID,file=PATH[,size=BYTES][,base=PATH] [--target ...]",
		Short: "Serve a snapshot's disk files over NBD until the VM's QEMU has pushed its backup into each (a snapshot's copier pod)",
		Long: `Serve a snapshot's disk files over NBD until the VM's QEMU has pushed its backup into each.

A target without size= takes its size from DIR/` + diskcopy.SizesName + ` (JSON, bytes by drive id), which
the node agent writes from the running guest's drives: the wait for it is bounded (5 minutes).
For each --target, in order: create FILE, a sparse file of SIZE bytes (with base=, a sparse copy
of BASE, an earlier snapshot's completed disk of the same size, for an incremental backup); then
serve it with qemu-nbd on DIR/nbd-ID.sock, export name ID, for one client. Once every socket
listens, DIR/` + diskcopy.ReadyName + ` is written: the node agent then relays the VM's QEMU to the
sockets. When every client has disconnected and every qemu-nbd exited 0, each file is synced and
gets its marker, ` + diskcopy.MarkerName + ` in its directory (JSON: drive, size, base, completedAt).

A copier pod is never restarted: an existing FILE, marker or socket is an earlier attempt's and is
refused. Exit 0: every drive served and marked; 1: a qemu-nbd or a copy failed (the reason on
stderr and in --termination-log), nothing marked; 2: refused before anything was written; 143:
stopped by SIGTERM or SIGINT, every qemu-nbd killed, nothing marked.`,
		Example: `  virtpod-runner disk-target --control-dir=/var/run/virtpod/control \
    --target=drive=root,file=/virtpod/snapshot/root/disk.img,size=10737418240 \
    --target=drive=disk-data,file=/virtpod/snapshot/data/disk.img,size=21474836480,base=/virtpod/base/data/disk.img`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			*code = runDiskCopier("disk-target", terminationLog, func(ctx context.Context, log *zap.Logger) error {
				specs := make([]diskcopy.TargetSpec, 0, len(targets))
				for _, s := range targets {
					t, err := diskcopy.ParseTarget(s)
					if err != nil {
						return err
					}
					specs = append(specs, t)
				}
				return diskcopy.Target(ctx, controlDir, specs, diskcopy.TargetOptions{QEMUNBD: qemuNBD, Log: log})
			})
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&controlDir, "control-dir", "", "the pod's control directory, which the node agent reaches: the NBD sockets nbd-<drive>.sock and "+diskcopy.ReadyName+" go there (required)")
	f.StringArrayVar(&targets, "target", nil, "a disk to serve, drive=<root|disk-NAME>,file=<absolute path of the new disk file>[,size=<bytes>, else from "+diskcopy.SizesName+"][,base=<absolute path of an earlier snapshot's disk>]; repeat per drive")
	f.StringVar(&qemuNBD, "qemu-nbd-binary", os.Getenv(diskcopy.EnvQEMUNBD), "path of "+diskcopy.QEMUNBDName+" (env "+diskcopy.EnvQEMUNBD+"; default: next to qemu-img, "+diskcopy.QEMUNBD+", or on PATH)")
	f.StringVar(&terminationLog, "termination-log", "/dev/termination-log", "file the exit reason is written to (the container's terminationMessagePath)")
	return c
}

// diskCopyCommand copies disk files directly: a stopped VM's into a snapshot's claims, or a
// snapshot's into a restored VM's.
func diskCopyCommand(code *int) *cobra.Command {
	var copies []string
	var requireMarker bool
	var terminationLog string
	c := &cobra.Command{
		Use:   "disk-copy --copy from=PATH,to=PATH[,size=BYTES][,drive=ID] [--copy ...]",
		Short: "Copy disk files sparse into new files and mark them complete (a snapshot's copier pod)",
		Long: `Copy disk files sparse into new files and mark them complete: a stopped VM's disks into a
snapshot's claims, or a snapshot's disks into a restored VM's new claims.

Every --copy is checked before the first is made: FROM must exist (with --require-marker, as a
completed snapshot disk: its directory has ` + diskcopy.MarkerName + `), TO must not, nor TO` + diskcopy.PartialSuffix + `.
Each copy goes to TO` + diskcopy.PartialSuffix + ` (holes and zero blocks stay holes), is synced, renamed to TO,
and gets the marker ` + diskcopy.MarkerName + ` in TO's directory. A size= above FROM's size extends TO
with a hole; below it is refused. Progress is logged every 64 MiB, at most once a second.

Exit 0: every copy made; 1: a copy failed (the reason on stderr and in --termination-log); 2:
refused before anything was written; 143: stopped by SIGTERM or SIGINT.`,
		Example: `  virtpod-runner disk-copy --require-marker \
    --copy=from=/virtpod/snapshot/root/disk.img,to=/virtpod/restore/root/disk.img,drive=root`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			*code = runDiskCopier("disk-copy", terminationLog, func(ctx context.Context, log *zap.Logger) error {
				specs := make([]diskcopy.CopySpec, 0, len(copies))
				for _, s := range copies {
					c, err := diskcopy.ParseCopy(s)
					if err != nil {
						return err
					}
					specs = append(specs, c)
				}
				return diskcopy.Copy(ctx, specs, diskcopy.CopyOptions{Log: log, RequireMarker: requireMarker})
			})
			return nil
		},
	}
	f := c.Flags()
	f.StringArrayVar(&copies, "copy", nil, "a copy, from=<absolute path>,to=<absolute path of the new file>[,size=<bytes>][,drive=<root|disk-NAME>, recorded in the marker]; repeat per disk")
	f.BoolVar(&requireMarker, "require-marker", false, "refuse a from= that is not a completed snapshot disk (no "+diskcopy.MarkerName+" next to it): what a restore asks")
	f.StringVar(&terminationLog, "termination-log", "/dev/termination-log", "file the exit reason is written to (the container's terminationMessagePath)")
	return c
}

// runDiskCopier runs one copier program with a logger, until SIGTERM or SIGINT, and returns its
// exit code (diskcopy.ExitCode).
func runDiskCopier(name, terminationLog string, run func(context.Context, *zap.Logger) error) int {
	zc := zap.NewProductionConfig()
	zc.Sampling = nil
	log, err := zc.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+": logger:", err)
		return runner.ExitError
	}
	defer log.Sync() //nolint:errcheck
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	err = run(ctx, log)
	code := diskcopy.ExitCode(err)
	msg := "done"
	if err != nil {
		msg = err.Error()
		log.Error(name+" failed", zap.Int("exitCode", code), zap.String("reason", msg))
		// Plain text on stderr too, so the reason reads well in `kubectl logs`.
		fmt.Fprintln(os.Stderr, name+":", msg)
	} else {
		log.Info(name + " done")
	}
	if err := runner.WriteTerminationMessage(terminationLog, msg); err != nil {
		log.Warn("could not write the termination message", zap.String("path", terminationLog), zap.Error(err))
	}
	return code
}
