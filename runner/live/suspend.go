package live

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/hypervisor"
	"github.com/virtpod/virtpod/runner/status"
)

// Suspend and resume of a whole guest (docs/runner.md): PUT /v1/suspend pauses the guest and
// writes its state (memory and devices; its disks are volumes that keep themselves) to
// --suspend-to, then the runner ends; --resume-from starts a new runner's QEMU from that state
// instead of booting. Both use QEMU's migration stream through a unix socket the runner itself
// serves or feeds, so QEMU 7.2 (no file: URI) and 10.0 take the same path, and QEMU never
// opens the file (its sandbox spawns nothing).

// Sockets in the state directory: QEMU writes a suspend's stream to suspendSocketName, and
// reads a resume's from ResumeSocketName.
const (
	suspendSocketName = "suspend.sock"
	ResumeSocketName  = "resume.sock"
)

// saveTimeout bounds a whole suspend: a 1 GiB guest's state takes seconds.
const saveTimeout = 10 * time.Minute

// Suspender is the runner's side of a suspend, shared by the control API and the supervisor.
type Suspender struct {
	to       string // --suspend-to; "" serves no suspend
	stateDir string
	hv       hypervisor.Hypervisor
	mig      *Migration
	board    *status.Board
	log      *zap.Logger

	mu     sync.Mutex // held for a whole suspend
	status controlapi.SuspendStatus
	saved  chan struct{} // closed once the state is saved: the supervisor ends QEMU
}

// NewSuspender suspends hv to cfg's --suspend-to.
func NewSuspender(cfg runnerconfig.Config, hv hypervisor.Hypervisor, mig *Migration, board *status.Board, log *zap.Logger) *Suspender {
	return &Suspender{to: cfg.SuspendTo, stateDir: cfg.StateDir, hv: hv, mig: mig, board: board, log: log,
		status: controlapi.SuspendStatus{State: controlapi.SuspendNone}, saved: make(chan struct{})}
}

// Routes registers GET and PUT /v1/suspend.
func (s *Suspender) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+controlapi.SuspendPath, func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		st := s.status
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("PUT "+controlapi.SuspendPath, s.put)
}

// Saved is closed once the guest's state is saved: the supervisor then ends the hypervisor.
func (s *Suspender) Saved() <-chan struct{} { return s.saved }

// put saves the guest and answers once it is saved (200), or with why not; a guest that
// could not be saved runs on.
func (s *Suspender) put(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	refuse := func(why string) {
		writeJSON(w, http.StatusConflict, controlapi.SuspendStatus{State: s.status.State, Error: why})
	}
	switch {
	case s.status.State == controlapi.SuspendSaved:
		writeJSON(w, http.StatusOK, s.status)
		return
	case s.to == "":
		refuse("this runner has no --suspend-to: its guest has disks that live with the pod, or it was started without a place for its state")
		return
	case s.mig.Waiting() || s.mig.Sending():
		refuse("the guest is migrating: suspend it once the migration ended")
		return
	case s.board.Get().State != status.StateRunning:
		refuse("the guest is not running (" + s.board.Get().State + "): only a running guest is suspended")
		return
	}
	s.status = controlapi.SuspendStatus{State: controlapi.SuspendSaving}
	ctx, cancel := context.WithTimeout(r.Context(), saveTimeout)
	defer cancel()
	start := time.Now()
	n, err := s.save(ctx)
	if err != nil {
		s.log.Error("suspend failed; the guest runs on", zap.Error(err))
		s.status = controlapi.SuspendStatus{State: controlapi.SuspendFailed, Error: err.Error()}
		writeJSON(w, http.StatusInternalServerError, s.status)
		return
	}
	s.log.Info("suspended: the guest's state is saved", zap.String("to", s.to), zap.Int64("bytes", n), zap.Duration("took", time.Since(start)))
	s.status = controlapi.SuspendStatus{State: controlapi.SuspendSaved, Bytes: n}
	close(s.saved)
	writeJSON(w, http.StatusOK, s.status)
}

// save streams the paused guest's state into a file beside --suspend-to, synced, and renames it
// into place once QEMU completed: a state at --suspend-to is always whole. On failure the guest
// is resumed and the partial file removed.
func (s *Suspender) save(ctx context.Context) (n int64, err error) {
	saver, ok1 := s.hv.(hypervisor.Saver)
	m, ok2 := s.hv.(hypervisor.Migrator)
	if !ok1 || !ok2 {
		return 0, errors.New("this hypervisor cannot save a guest's state")
	}
	sock := filepath.Join(s.stateDir, suspendSocketName)
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return 0, err
	}
	defer l.Close()
	partial := s.to + ".partial"
	f, err := os.OpenFile(partial, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("--suspend-to: %w", err)
	}
	defer func() {
		f.Close()
		if err != nil {
			os.Remove(partial)
			if rerr := m.ResumeGuest(); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()
	type copied struct {
		n   int64
		err error
	}
	done := make(chan copied, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			done <- copied{err: err}
			return
		}
		defer conn.Close()
		n, err := io.Copy(f, conn)
		done <- copied{n, err}
	}()
	if err := saver.SaveGuest(sock); err != nil {
		return 0, err
	}
	if err := awaitSaved(ctx, m); err != nil {
		return 0, err
	}
	var c copied
	select {
	case c = <-done:
	case <-ctx.Done():
		return 0, fmt.Errorf("writing the guest's state: %w", ctx.Err())
	}
	if c.err != nil {
		return 0, fmt.Errorf("writing the guest's state: %w", c.err)
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	if err := os.Rename(partial, s.to); err != nil {
		return 0, err
	}
	if d, err := os.Open(filepath.Dir(s.to)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return c.n, nil
}

// awaitSaved waits until QEMU has written the whole state, or failed to; at ctx's end it cancels.
func awaitSaved(ctx context.Context, m hypervisor.Migrator) error {
	for {
		info, err := m.QueryMigrate()
		if err != nil {
			return err
		}
		switch hypervisor.MigrationState(info.Status, false) {
		case controlapi.MigrationCompleted:
			return nil
		case controlapi.MigrationFailed, controlapi.MigrationCancelled:
			return fmt.Errorf("QEMU could not save the guest: %s %s", info.Status, info.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			_, _ = m.CancelMigration(10 * time.Second)
			return fmt.Errorf("saving the guest's state: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// FeedState writes the saved state at path into the resuming QEMU's incoming socket; the
// supervisor resumes the guest once QEMU reports it loaded.
func FeedState(ctx context.Context, path, sock string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--resume-from: %w", err)
	}
	defer f.Close()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return fmt.Errorf("--resume-from: QEMU's incoming socket: %w", err)
	}
	defer conn.Close()
	if _, err := io.Copy(conn, f); err != nil {
		return fmt.Errorf("--resume-from: loading the state: %w", err)
	}
	return nil
}

// RemoveState removes a loaded state file, durably.
func RemoveState(path string) error {
	if err := os.Remove(path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
