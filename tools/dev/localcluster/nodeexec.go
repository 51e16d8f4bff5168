package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// execOpts is what node-exec does before it execs a second node's process.
type execOpts struct {
	netns     string   // join this network namespace (a pinned file, /run/netns/NAME)
	newMount  bool     // make a private mount namespace (host mounts still propagate in)
	binds     []string // SRC:DST bind mounts in it
	joinMount string   // or join this mount namespace (/proc/PID/ns/mnt)
}

// nodeExecCommand is `localcluster node-exec`: start's way to put a second node's containerd,
// kubelet and kube-proxy into the node's namespaces. Go cannot change its mount namespace in a
// forked child before exec, so the tool runs itself: one thread enters the namespaces, makes
// the mounts and execs the component, which keeps that thread's namespaces.
func nodeExecCommand() *cobra.Command {
	var o execOpts
	cmd := &cobra.Command{
		Use:          "node-exec [flags] -- COMMAND [ARGS...]",
		Short:        "Run COMMAND in a second node's namespaces (used by node-up)",
		Hidden:       true,
		SilenceUsage: true,
		Args:         cobra.MinimumNArgs(1),
		RunE:         func(_ *cobra.Command, args []string) error { return nodeExec(o, args) },
	}
	f := cmd.Flags()
	f.StringVar(&o.netns, "netns", "", "network namespace file to join")
	f.BoolVar(&o.newMount, "new-mount-ns", false, "make a mount namespace of its own, a slave of the host's")
	f.StringArrayVar(&o.binds, "bind", nil, "SRC:DST: bind SRC over DST in the new mount namespace")
	f.StringVar(&o.joinMount, "mount-ns", "", "mount namespace file to join (/proc/PID/ns/mnt)")
	return cmd
}

// nodeExec enters the namespaces o names on this thread and execs argv; it returns only on
// failure.
func nodeExec(o execOpts, argv []string) error {
	if o.newMount && o.joinMount != "" {
		return fmt.Errorf("--new-mount-ns and --mount-ns: choose one")
	}
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	runtime.LockOSThread() // never unlocked: the process becomes argv on this thread
	if o.netns != "" {
		if err := setnsPath(o.netns, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("network namespace %s: %w", o.netns, err)
		}
	}
	if o.joinMount != "" {
		// setns to a mount namespace refuses a thread that shares its filesystem attributes
		// (root, cwd) with the runtime's other threads.
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return err
		}
		if err := setnsPath(o.joinMount, unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("mount namespace %s: %w", o.joinMount, err)
		}
	}
	if o.newMount {
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("new mount namespace: %w", err)
		}
		// A slave: mounts the host makes later still show here (where the host's root is
		// shared), and the node's own (its pods' volumes, overlays, network namespaces) stay here.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
			return fmt.Errorf("making / a slave mount: %w", err)
		}
		for _, b := range o.binds {
			src, dst, ok := strings.Cut(b, ":")
			if !ok || src == "" || dst == "" {
				return fmt.Errorf("--bind %q: want SRC:DST", b)
			}
			if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("bind %s over %s: %w", src, dst, err)
			}
		}
	}
	return syscall.Exec(bin, argv, os.Environ())
}

func setnsPath(path string, kind int) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Setns(fd, kind)
}
