package diskcopy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/boot"
)

// Serve is the program of a hotplugged disk's attachment pod (`virtpod-runner disk-serve`,
// docs/hotplug.md): it readies the disk as the runner readies a disk of its own at start
// (boot.Disks: a claim's disk.img made sparse once, a blank file on an emptyDir, an ISO of a
// ConfigMap's or Secret's files) and serves it with qemu-nbd on controlDir/disk.sock
// (controlapi.AttachmentSocket), export name the disk's name, for the guest's QEMU, which the
// node agent links to it. qemu-nbd is persistent: QEMU may reconnect after a hiccup.
//
// The socket appears only once qemu-nbd serves (it listens on a hidden name, renamed when its
// pid file says it is ready), so the agent never links a socket that does not answer yet. When
// ctx ends (SIGTERM) it stops qemu-nbd, syncs a writable disk (a write the guest was told is done
// is on the volume) and returns nil; a qemu-nbd that dies is a failure with its stderr.
func Serve(ctx context.Context, controlDir string, d runnerconfig.Disk, o ServeOptions) error {
	o.defaults()
	if err := CheckServe(controlDir, d, o.StateDir); err != nil {
		return err
	}
	nbd := o.QEMUNBD
	if nbd == "" {
		var err error
		if nbd, err = FindQEMUNBD(); err != nil {
			return err
		}
	}
	sock, tmp, pid := filepath.Join(controlDir, controlapi.AttachmentSocket), filepath.Join(controlDir, serveTmpSocket), filepath.Join(controlDir, servePidFile)
	if err := clearSockets(sock, tmp, pid); err != nil {
		return err
	}
	drives, cleanup, err := boot.Disks(runnerconfig.Config{Disks: []runnerconfig.Disk{d}, StateDir: o.StateDir}, o.Log)
	if err != nil {
		return err
	}
	defer cleanup()
	file := drives[0].Path
	defer func() { _ = clearSockets(sock, tmp, pid) }() // qemu-nbd removes none of them when killed
	s, err := startServer(nbd, nbdSpec{export: d.Name, sock: tmp, pid: pid, file: file, persistent: true, readOnly: d.ReadOnly})
	if err != nil {
		return err
	}
	if err = waitReady(ctx, []*server{s}, o.ReadyTimeout, o.Log); err == nil {
		err = os.Rename(tmp, sock)
	}
	if err == nil {
		o.Log.Info("serving disk "+d.Name, zap.String("socket", sock), zap.Bool("readOnly", d.ReadOnly))
		select {
		case <-s.exited:
			err = s.failure("exited")
		case <-ctx.Done():
		}
	}
	stopAll([]*server{s}, o.StopGrace)
	if ctx.Err() != nil {
		err = nil // stopped as asked: not a failure, even before qemu-nbd was ready
	}
	if !d.ReadOnly {
		err = errors.Join(err, syncFile(file))
	}
	return err
}

// ServeOptions are Serve's settings; the zero value works where qemu-nbd can be found, for
// every kind of disk but files.
type ServeOptions struct {
	// QEMUNBD is qemu-nbd's path; "" finds it (FindQEMUNBD).
	QEMUNBD string
	// StateDir is a writable folder of the pod's where a files disk's ISO is written.
	StateDir string
	// Log receives what Serve does; nil logs nothing.
	Log *zap.Logger
	// ReadyTimeout bounds how long qemu-nbd may take to listen (default 30s); StopGrace how
	// long it has after SIGTERM before SIGKILL (default 5s).
	ReadyTimeout, StopGrace time.Duration
}

func (o *ServeOptions) defaults() {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 5 * time.Second
	}
}

// Names in the control directory besides the socket: where qemu-nbd listens until it serves,
// and its pid file, which says it does.
const (
	serveTmpSocket = ".disk.sock.new"
	servePidFile   = ".disk.pid"
)

var (
	serveNameRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?$`)
	servePathRe = regexp.MustCompile(`^/[-._/A-Za-z0-9]*$`)
)

// ParseServeDisk reads --disk as the runner does; an unreadable one is a refusal.
func ParseServeDisk(s string) (runnerconfig.Disk, error) {
	if s == "" {
		return runnerconfig.Disk{}, refuse("--disk is required: the disk to serve, name=NAME,kind=KIND,path=PATH[,size-mib=N][,readonly]")
	}
	d, err := runnerconfig.ParseDisk(s)
	if err != nil {
		return runnerconfig.Disk{}, refuse("--disk: %v", err)
	}
	return d, nil
}

// CheckServe refuses a disk-serve request that is not an attachment pod's own: a bad name, a
// kind it cannot serve, a path that is not clean, settings that are the runner's (migrate=,
// slot=). It touches no file but for the control directory's stat.
func CheckServe(controlDir string, d runnerconfig.Disk, stateDir string) error {
	if controlDir == "" || !filepath.IsAbs(controlDir) || filepath.Clean(controlDir) != controlDir {
		return refuse("--control-dir %q: want a clean absolute path, the pod's control directory", controlDir)
	}
	if sock := filepath.Join(controlDir, serveTmpSocket); len(sock) > maxSocketPath {
		return refuse("--control-dir %q is too long: the socket %s is %d bytes, and a unix socket path holds at most %d", controlDir, sock, len(sock), maxSocketPath)
	}
	if fi, err := os.Stat(controlDir); err != nil || !fi.IsDir() {
		return refuse("--control-dir %s is not a directory (%v): mount the pod's control directory there", controlDir, errOr(err, "not a directory"))
	}
	if err := checkServeDisk(d); err != nil {
		return err
	}
	if d.Kind == runnerconfig.DiskFiles && (stateDir == "" || !filepath.IsAbs(stateDir) || filepath.Clean(stateDir) != stateDir) {
		return refuse("--state-dir %q: a files disk needs a clean absolute path of a writable folder for its ISO", stateDir)
	}
	return nil
}

// checkServeDisk checks --disk alone.
func checkServeDisk(d runnerconfig.Disk) error {
	switch {
	case !serveNameRe.MatchString(d.Name) || d.Name == "root" || d.Name == "cidata":
		return refuse("--disk: name %q: want a disk name, a DNS label of at most 20 characters, not root or cidata", d.Name)
	case d.Kind != runnerconfig.DiskBlock && d.Kind != runnerconfig.DiskFile && d.Kind != runnerconfig.DiskEmpty && d.Kind != runnerconfig.DiskFiles:
		return refuse("--disk: kind %q: disk-serve serves %s, %s, %s or %s disks", d.Kind, runnerconfig.DiskBlock, runnerconfig.DiskFile, runnerconfig.DiskEmpty, runnerconfig.DiskFiles)
	case !servePathRe.MatchString(d.Path) || filepath.Clean(d.Path) != d.Path:
		return refuse("--disk: path %q: want a clean absolute path of letters, digits, '-', '_', '.' and '/'", d.Path)
	case d.Migrate != "" || d.Hotplug:
		return refuse("--disk: migrate= and slot= are the runner's, not disk-serve's")
	case d.Kind == runnerconfig.DiskFiles && !d.ReadOnly:
		return refuse("--disk: a files disk is always readonly")
	case d.Kind == runnerconfig.DiskEmpty && d.ReadOnly:
		return refuse("--disk: an empty disk the guest cannot write is of no use; drop readonly")
	case d.Kind == runnerconfig.DiskEmpty && d.SizeMiB < 1:
		return refuse("--disk: size-mib must be at least 1 for an empty disk, got %d", d.SizeMiB)
	case d.Kind == runnerconfig.DiskFile && d.SizeMiB < 0:
		return refuse("--disk: size-mib must not be negative, got %d (0 takes the volume's size)", d.SizeMiB)
	case d.Kind != runnerconfig.DiskFile && d.Kind != runnerconfig.DiskEmpty && d.SizeMiB != 0:
		return refuse("--disk: size-mib is only for file and empty disks")
	}
	return nil
}

// clearSockets removes sockets an earlier process of the pod left, and refuses anything else
// where they go: the directory is the pod's alone, so that is not ours to remove.
func clearSockets(paths ...string) error {
	for _, p := range paths {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSocket == 0 && filepath.Base(p) != servePidFile:
			return refuse("%s is there and not a socket: the control directory holds what disk-serve did not make", p)
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", p, err)
		}
	}
	return nil
}
