package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/hypervisor"
	"github.com/virtpod/virtpod/runner/status"
)

// Backups of the running guest's drives (docs/runner.md): PUT /v1/backup copies the drives it
// names, as they were at one instant for all of them, onto targets the node agent serves over
// NBD in the control directory, optionally with the guest's file systems frozen around that
// instant, and answers once the copies are complete; GET reads the last backup's status. One at
// a time, and none while the guest migrates or is being suspended.

// Bounds of a backup: the whole of it, the guest agent's freeze, and each try of its thaw (the
// agent never thaws by itself, so a thaw is tried thawTries times).
const (
	backupTimeout = 30 * time.Minute
	freezeTimeout = 20 * time.Second
	thawTimeout   = 10 * time.Second
	thawTries     = 3
)

// Backup is the control API's backup of the guest's drives.
type Backup struct {
	hv     hypervisor.Backuper // nil: the provider cannot
	ctlDir string
	mig    *Migration
	sus    *Suspender
	agent  *GuestAgent
	board  *status.Board
	log    *zap.Logger

	busy sync.Mutex // held for a whole backup
	mu   sync.Mutex // guards last
	last controlapi.BackupStatus
}

// NewBackup backs up the suspender's hypervisor (the runner's guest) into cfg's control
// directory, freezing the guest through agent, and refuses while mig or sus is under way.
func NewBackup(cfg runnerconfig.Config, sus *Suspender, mig *Migration, agent *GuestAgent, board *status.Board, log *zap.Logger) *Backup {
	b := &Backup{mig: mig, sus: sus, agent: agent, board: board, log: log, last: controlapi.BackupStatus{State: controlapi.BackupNone}}
	if cfg.ControlSocket != "" {
		b.ctlDir = filepath.Dir(cfg.ControlSocket)
	}
	if sus != nil {
		b.hv, _ = sus.hv.(hypervisor.Backuper)
	}
	return b
}

// Routes registers GET and PUT /v1/backup.
func (b *Backup) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+controlapi.BackupPath, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, b.lastStatus())
	})
	mux.HandleFunc("PUT "+controlapi.BackupPath, b.put)
	mux.HandleFunc("GET "+controlapi.DrivesPath, b.drives)
}

// drives answers the guest's drives and their sizes (the node agent sizes a backup's targets
// by them).
func (b *Backup) drives(w http.ResponseWriter, r *http.Request) {
	if b.hv == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "drives: only provider " + runnerconfig.ProviderQEMU + " lists its drives"})
		return
	}
	d, err := b.hv.Drives(r.Context())
	if err != nil {
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (b *Backup) lastStatus() controlapi.BackupStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

func (b *Backup) setLast(st controlapi.BackupStatus) {
	b.mu.Lock()
	b.last = st
	b.mu.Unlock()
}

// put runs a backup and answers 200 once it is complete, 409 with why when it cannot run, 500
// when the copy failed (the drives then keep the bitmaps they had).
func (b *Backup) put(w http.ResponseWriter, r *http.Request) {
	if b.hv == nil {
		writeJSON(w, http.StatusNotImplemented, controlapi.BackupStatus{Error: "backup: provider " + runnerconfig.ProviderCloudHypervisor +
			" cannot back up a running guest's drives; only provider " + runnerconfig.ProviderQEMU + " can"})
		return
	}
	req, ok := decodeBackupRequest(w, r)
	if !ok {
		return
	}
	refuse := func(why string) {
		writeJSON(w, http.StatusConflict, controlapi.BackupStatus{Bitmap: req.Bitmap, Error: why})
	}
	if !b.busy.TryLock() {
		refuse("a backup is already under way: ask again once it ended (GET " + controlapi.BackupPath + ")")
		return
	}
	defer b.busy.Unlock()
	if why := b.cannotBackUp(req); why != "" {
		refuse(why)
		return
	}
	prev := b.lastStatus()
	b.setLast(controlapi.BackupStatus{State: controlapi.BackupRunning, Bitmap: req.Bitmap})
	ctx, cancel := context.WithTimeout(r.Context(), backupTimeout)
	defer cancel()
	start := time.Now()
	b.log.Info("backup requested", zap.Int("drives", len(req.Drives)), zap.String("bitmap", req.Bitmap), zap.Bool("freeze", req.Freeze))
	st, err := b.run(ctx, req)
	switch {
	case errors.Is(err, hypervisor.ErrNotRunning) || hypervisor.IsBackupRefusal(err):
		b.setLast(prev)
		b.log.Info("backup refused", zap.Error(err))
		refuse(err.Error())
	case err != nil:
		st.State, st.Error = controlapi.BackupFailed, err.Error()
		b.setLast(st)
		b.log.Error("backup failed; the drives keep their earlier bitmaps", zap.Duration("took", time.Since(start)), zap.Error(err))
		writeJSON(w, http.StatusInternalServerError, st)
	default:
		st.State = controlapi.BackupCompleted
		b.setLast(st)
		var copied int64
		for _, d := range st.Drives {
			copied += d.Copied
		}
		b.log.Info("backup completed", zap.Int64("copiedBytes", copied), zap.Any("drives", st.Drives), zap.String("bitmap", st.Bitmap),
			zap.String("consistency", st.Consistency), zap.String("freezeError", st.FreezeError), zap.Duration("took", time.Since(start)))
		writeJSON(w, http.StatusOK, st)
	}
}

// decodeBackupRequest reads a PUT's body, answering a bad one naming the field.
func decodeBackupRequest(w http.ResponseWriter, r *http.Request) (controlapi.BackupRequest, bool) {
	var req controlapi.BackupRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, controlapi.BackupStatus{Error: "body: " + err.Error() +
			`; want {"drives":[{"drive":"disk-data","socket":"backup-data.sock","since":"snap-1"}],"bitmap":"snap-2","freeze":true}`})
		return req, false
	}
	if err := req.Validate(); err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, controlapi.BackupStatus{Bitmap: req.Bitmap, Error: oneLine(err)})
		return req, false
	}
	return req, true
}

// cannotBackUp says why no backup can run now; "" when one can.
func (b *Backup) cannotBackUp(req controlapi.BackupRequest) string {
	if st := b.board.Get().State; st != status.StateRunning {
		return "the guest is not running (" + st + "): only a running guest is backed up"
	}
	if b.mig != nil && b.mig.Waiting() {
		return "this runner is a migration target waiting for its guest: it has none to back up yet"
	}
	if b.mig != nil && b.mig.m != nil {
		info, err := b.mig.m.QueryMigrate()
		if err != nil {
			return err.Error()
		}
		if hypervisor.MigrationState(info.Status, false) == controlapi.MigrationActive {
			return "a migration of the guest is under way: back up once it ended"
		}
	}
	if suspendUnderWay(b.sus) {
		return "the guest is being suspended: nothing is backed up from a guest that is saved and ends"
	}
	for _, d := range req.Drives {
		if p := filepath.Join(b.ctlDir, d.Socket); !isSocket(p) {
			return fmt.Sprintf("drive %s: nothing listens on %s: serve the drive's target there over NBD before asking for a backup", d.Drive, p)
		}
	}
	return ""
}

// suspendUnderWay reports whether a suspend runs or has saved the guest: a suspend holds the
// suspender's lock for its whole length, a GET of its status only for a moment.
func suspendUnderWay(s *Suspender) bool {
	if s == nil {
		return false
	}
	for range 20 {
		if s.mu.TryLock() {
			st := s.status.State
			s.mu.Unlock()
			return st == controlapi.SuspendSaving || st == controlapi.SuspendSaved
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// run has the hypervisor back up, freezing the guest around the instant when asked.
func (b *Backup) run(ctx context.Context, req controlapi.BackupRequest) (controlapi.BackupStatus, error) {
	fr := freeze{consistency: controlapi.ConsistencyCrash}
	var quiesce func() func()
	if req.Freeze {
		quiesce = func() func() { return b.freeze(ctx, &fr) }
	}
	st, err := b.hv.Backup(ctx, b.ctlDir, req, quiesce)
	st.Consistency, st.FreezeError, st.FrozenFilesystems = fr.consistency, fr.err, fr.n
	return st, err
}

// freeze is how the guest was quiesced for a backup.
type freeze struct {
	consistency string
	err         string
	n           int
}

// freeze asks the guest agent to freeze the guest's file systems and returns the thaw, which
// runs even after a failed freeze (one that timed out may still happen) unless no agent was
// there to ask. A guest that could not be frozen is backed up all the same, crash-consistent.
func (b *Backup) freeze(ctx context.Context, fr *freeze) (thaw func()) {
	if b.agent == nil {
		fr.err = "no guest agent to freeze the file systems"
		return func() {}
	}
	fctx, cancel := context.WithTimeout(ctx, freezeTimeout)
	n, err := b.agent.Freeze(fctx)
	cancel()
	start := time.Now()
	switch {
	case err == nil:
		fr.consistency, fr.n = controlapi.ConsistencyGuestFrozen, n
	case NoAgent(err):
		fr.err = "no guest agent to freeze the file systems: " + err.Error()
		return func() {}
	default:
		fr.err = "the guest agent did not freeze the file systems: " + err.Error()
	}
	return func() {
		if err := b.thaw(); err != nil {
			fr.err = fmt.Sprintf("the guest agent did not thaw the file systems (they may still be frozen): %v", err)
			return
		}
		b.log.Info("the guest's file systems were frozen for the backup's instant", zap.Int("filesystems", fr.n), zap.Duration("for", time.Since(start)))
	}
}

// thaw thaws the guest's file systems, trying thawTries times.
func (b *Backup) thaw() error {
	var err error
	for range thawTries {
		ctx, cancel := context.WithTimeout(context.Background(), thawTimeout)
		_, err = b.agent.Thaw(ctx)
		cancel()
		if err == nil {
			return nil
		}
		b.log.Warn("thawing the guest's file systems", zap.Error(err))
	}
	b.log.Error("the guest's file systems could not be thawed: they may stay frozen", zap.Error(err))
	return err
}
