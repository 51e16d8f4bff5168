package diskcopy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/disk/sparsecopy"
)

// TargetOptions are Target's settings; the zero value works where qemu-nbd can be found.
type TargetOptions struct {
	// QEMUNBD is qemu-nbd's path; "" finds it (FindQEMUNBD).
	QEMUNBD string
	// Log receives what Target does; nil logs nothing.
	Log *zap.Logger
	// ReadyTimeout bounds how long a qemu-nbd may take to listen (default 30s).
	ReadyTimeout time.Duration
	// StopGrace is how long a qemu-nbd has after SIGTERM before SIGKILL (default 5s).
	StopGrace time.Duration
	// SizesTimeout bounds the wait for SizesName when a target has no size (default 5 min).
	SizesTimeout time.Duration
}

// Target creates each target's file (a sparse file of its size, or a sparse copy of its base),
// serves each on its own NBD socket in controlDir (SocketPath) with qemu-nbd, writes
// controlDir/ReadyName once all of them listen, and waits until each qemu-nbd has served its one
// client and exited. Then it syncs each file and writes its marker (MarkerName), and returns nil.
//
// It refuses (IsRefused, before anything is written) bad targets, a file or a marker already
// there, a base that is missing, incomplete or of another size, and leftovers of an earlier
// attempt in controlDir. A qemu-nbd that fails makes it stop the others and return the failure
// with that qemu-nbd's stderr; when ctx ends it stops them all and returns ctx's error. Either
// way no marker is written, and the files stay as they are.
//
// A marker says the client disconnected from qemu-nbd, not that its backup job succeeded: a
// client that dies midway disconnects too. Whoever drives the backup (the VM's runner) knows
// whether the job completed; a snapshot is complete when both say so.
func Target(ctx context.Context, controlDir string, targets []TargetSpec, o TargetOptions) error {
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 5 * time.Second
	}
	if err := CheckTargets(controlDir, targets); err != nil {
		return err
	}
	nbd := o.QEMUNBD
	if nbd == "" {
		var err error
		if nbd, err = FindQEMUNBD(); err != nil {
			return err
		}
	}
	if err := checkTargetFiles(controlDir, targets); err != nil {
		return err
	}
	targets, err := sized(ctx, controlDir, targets, o.SizesTimeout, log)
	if err != nil {
		return err
	}
	for _, t := range targets {
		if err := prepareTarget(ctx, t, log); err != nil {
			return err
		}
	}

	var servers []*server
	defer func() {
		for _, s := range servers {
			_ = os.Remove(s.pid)
			if fi, err := os.Lstat(s.sock); err == nil && fi.Mode()&fs.ModeSocket != 0 {
				_ = os.Remove(s.sock) // qemu-nbd removes it on a clean exit, not when killed
			}
		}
	}()
	for _, t := range targets {
		s, err := startServer(nbd, nbdSpec{export: t.Drive, sock: SocketPath(controlDir, t.Drive), pid: pidPath(controlDir, t.Drive), file: t.File})
		if err != nil {
			stopAll(servers, o.StopGrace)
			return err
		}
		servers = append(servers, s)
	}
	if err := waitReady(ctx, servers, o.ReadyTimeout, log); err != nil {
		stopAll(servers, o.StopGrace)
		return err
	}
	var ready strings.Builder
	for _, s := range servers {
		fmt.Fprintf(&ready, "%s %s\n", s.export, s.sock)
	}
	if err := writeFileSync(filepath.Join(controlDir, ReadyName), []byte(ready.String())); err != nil {
		stopAll(servers, o.StopGrace)
		return fmt.Errorf("write %s: %w", ReadyName, err)
	}
	log.Info("every drive is served", zap.String("ready", filepath.Join(controlDir, ReadyName)), zap.Int("drives", len(servers)))
	if err := waitServed(ctx, servers, o.StopGrace, log); err != nil {
		return err
	}

	for _, t := range targets {
		if err := syncFile(t.File); err != nil {
			return err
		}
		m := Marker{Drive: t.Drive, Size: t.Size, Base: t.Base != "", CompletedAt: time.Now().UTC()}
		if err := writeMarker(t.File, m); err != nil {
			return err
		}
		log.Info("snapshot disk complete", zap.String("drive", t.Drive), zap.String("file", t.File), zap.String("marker", MarkerPath(t.File)))
	}
	return nil
}

const earlierAttempt = "a copier pod is never restarted, so it is an earlier attempt's; the controller makes a new snapshot (with new claims) rather than reuse this one"

// checkTargetFiles refuses what is already there.
func checkTargetFiles(controlDir string, targets []TargetSpec) error {
	if fi, err := os.Stat(controlDir); err != nil || !fi.IsDir() {
		return refuse("--control-dir %s is not a directory (%v): mount the pod's control directory there", controlDir, errOr(err, "not a directory"))
	}
	if p := filepath.Join(controlDir, ReadyName); exists(p) {
		return refuse("%s exists already: %s", p, earlierAttempt)
	}
	for _, t := range targets {
		for _, p := range []string{SocketPath(controlDir, t.Drive), pidPath(controlDir, t.Drive)} {
			if exists(p) {
				return refuse("drive %s: %s exists already: %s", t.Drive, p, earlierAttempt)
			}
		}
		dir := filepath.Dir(t.File)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return refuse("drive %s: the directory of %s is not there (%v): is the snapshot's claim mounted at %s?", t.Drive, t.File, errOr(err, "not a directory"), dir)
		}
		if exists(t.File) {
			return refuse("drive %s: %s exists already: %s", t.Drive, t.File, earlierAttempt)
		}
		if exists(MarkerPath(t.File)) {
			return refuse("drive %s: %s exists already: %s", t.Drive, MarkerPath(t.File), earlierAttempt)
		}
		if t.Base == "" {
			continue
		}
		fi, err := os.Stat(t.Base)
		switch {
		case err != nil:
			return refuse("drive %s: base %s: %v: is the earlier snapshot's claim mounted?", t.Drive, t.Base, err)
		case !fi.Mode().IsRegular():
			return refuse("drive %s: base %s is not a regular file", t.Drive, t.Base)
		case t.Size != 0 && fi.Size() != t.Size: // a size the agent gives is checked once known (sized)
			return refuse("drive %s: base %s is %d bytes and size is %d: a base must be the same drive's earlier snapshot, of the drive's size (start a full snapshot, without base, after a resize)", t.Drive, t.Base, fi.Size(), t.Size)
		}
		if _, err := ReadMarker(t.Base); err != nil {
			return refuse("drive %s: base %s is not a completed snapshot disk (%v)", t.Drive, t.Base, err)
		}
	}
	return nil
}

// stopped is the error of an end by ctx, with its cause (such as the signal) in words.
func stopped(ctx context.Context, what string) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, ctx.Err()) {
		return fmt.Errorf("%s (%v): %w", what, c, ctx.Err())
	}
	return fmt.Errorf("%s: %w", what, ctx.Err())
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// prepareTarget creates t's file: a copy of its base, or a hole of its size.
func prepareTarget(ctx context.Context, t TargetSpec, log *zap.Logger) error {
	if t.Base != "" {
		log.Info("copying the base", zap.String("drive", t.Drive), zap.String("base", t.Base), zap.String("file", t.File))
		if _, err := sparseCopy(ctx, t.Base, t.File, t.Size, log.With(zap.String("drive", t.Drive))); err != nil {
			return fmt.Errorf("drive %s: %w", t.Drive, err)
		}
		return sparsecopy.SyncDir(filepath.Dir(t.File))
	}
	f, err := os.OpenFile(t.File, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("drive %s: %w", t.Drive, err)
	}
	err = f.Truncate(t.Size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("drive %s: create %s: %w", t.Drive, t.File, err)
	}
	return sparsecopy.SyncDir(filepath.Dir(t.File))
}

// nbdSpec is what one qemu-nbd serves: file as export on sock, its pid written to pid once it
// listens. Target's serve one client and exit; Serve's are persistent, and may be read-only.
type nbdSpec struct {
	export, sock, pid, file string
	persistent, readOnly    bool
}

// server is one qemu-nbd.
type server struct {
	nbdSpec
	cache  string
	cmd    *exec.Cmd
	stderr *tail
	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed
	ready  bool
}

// nbdArgs are a snapshot target's qemu-nbd arguments: one client (the VM's QEMU, through the
// node agent's relay), no --persistent so it exits when that client disconnects, raw (never
// probed: the guest wrote the data), and zeros written or discarded become holes.
func nbdArgs(drive, sock, pid, file string, direct bool) []string {
	return nbdSpec{export: drive, sock: sock, pid: pid, file: file}.args(direct)
}

// args are qemu-nbd's arguments for n: raw always (the guest's bytes are never probed for a
// format); a read-only export refuses writes, a writable one passes the guest's discards on.
func (n nbdSpec) args(direct bool) []string {
	cache := "writeback"
	if direct {
		cache = "none"
	}
	args := []string{"--socket=" + n.sock, "--format=raw", "--export-name=" + n.export, "--shared=1"}
	if n.persistent {
		args = append(args, "--persistent")
	}
	args = append(args, "--cache="+cache, "--aio=threads")
	switch {
	case n.readOnly:
		args = append(args, "--read-only")
	case n.persistent:
		args = append(args, "--discard=unmap")
	default:
		args = append(args, "--discard=unmap", "--detect-zeroes=unmap")
	}
	return append(args, "--pid-file="+n.pid, "--", n.file)
}

func startServer(nbd string, n nbdSpec) (*server, error) {
	s := &server{nbdSpec: n, stderr: newTail(4096), exited: make(chan struct{})}
	direct := directProbe(n.file)
	s.cache = map[bool]string{true: "none", false: "writeback"}[direct]
	s.cmd = exec.Command(nbd, n.args(direct)...)
	s.cmd.Stdout, s.cmd.Stderr = s.stderr, s.stderr
	// Should this process die without stopping it, qemu-nbd goes too.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("drive %s: start %s: %w", n.export, nbd, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	return s, nil
}

// directProbe is supportsDirect; tests replace it to run cache=writeback on any file system.
var directProbe = supportsDirect

// listening says whether s's qemu-nbd listens: it writes its pid file after it has bound and
// listened on its socket and opened the file.
func (s *server) listening() bool {
	b, err := os.ReadFile(s.pid)
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(s.cmd.Process.Pid) {
		return false
	}
	fi, err := os.Lstat(s.sock)
	return err == nil && fi.Mode()&fs.ModeSocket != 0
}

func (s *server) failure(what string) error {
	msg := strings.TrimSpace(s.stderr.String())
	if msg == "" {
		msg = "(no output)"
	}
	return fmt.Errorf("drive %s: qemu-nbd %s: %v: %s", s.export, what, s.err, msg)
}

func waitReady(ctx context.Context, servers []*server, timeout time.Duration, log *zap.Logger) error {
	deadline := time.After(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		pending := 0
		for _, s := range servers {
			if s.ready {
				continue
			}
			select {
			case <-s.exited:
				return s.failure("exited before it listened")
			default:
			}
			if s.ready = s.listening(); s.ready {
				log.Info("serving "+s.export+" at "+s.sock, zap.String("drive", s.export), zap.String("socket", s.sock),
					zap.String("file", s.file), zap.String("cache", s.cache), zap.Int("pid", s.cmd.Process.Pid))
			} else {
				pending++
			}
		}
		if pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return stopped(ctx, "stopped before every drive was served")
		case <-deadline:
			for _, s := range servers {
				if !s.ready {
					return fmt.Errorf("drive %s: qemu-nbd did not listen on %s within %v: %s", s.export, s.sock, timeout, strings.TrimSpace(s.stderr.String()))
				}
			}
		case <-tick.C:
		}
	}
}

// waitServed waits until every qemu-nbd has exited: 0 after its client disconnected.
func waitServed(ctx context.Context, servers []*server, grace time.Duration, log *zap.Logger) error {
	exited := make(chan *server, len(servers))
	for _, s := range servers {
		go func() {
			<-s.exited
			exited <- s
		}()
	}
	for range servers {
		select {
		case s := <-exited:
			if s.err != nil {
				stopAll(servers, grace)
				return s.failure("failed")
			}
			log.Info("served "+s.export, zap.String("drive", s.export), zap.String("file", s.file))
		case <-ctx.Done():
			stopAll(servers, grace)
			return stopped(ctx, "stopped before every drive was served")
		}
	}
	return nil
}

// stopAll stops every qemu-nbd still running: SIGTERM, and SIGKILL after grace.
func stopAll(servers []*server, grace time.Duration) {
	for _, s := range servers {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	for _, s := range servers {
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-s.exited:
		case <-timer.C:
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
		timer.Stop()
	}
}
