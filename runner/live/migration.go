package live

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/disk/diskimage"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/hypervisor"
	"github.com/virtpod/virtpod/runner/status"
)

// Live migration's control API (docs/runner.md): PUT /v1/migration on the source starts sending
// the guest to migrate-out.sock, where the node agent listens; GET reports either side's
// progress; DELETE on the source cancels, or after a completed send resumes the guest here.

// MigrationRequest and MigrationStatus are the control API's wire types (pkg/controlapi).
type (
	MigrationRequest = controlapi.MigrationRequest
	MigrationStatus  = controlapi.MigrationStatus
)

// resumedNote is the error a source reports after it resumed its guest from a completed send.
const resumedNote = "the guest was resumed here after the migration completed"

// Migration is the runner's side of a live migration, shared by the control API and the
// supervisor.
type Migration struct {
	m      hypervisor.Migrator // nil: the provider cannot migrate
	target bool                // --incoming
	ctlDir string
	refuse string                  // why this guest cannot be sent ("" when it can)
	disks  []hypervisor.MirrorDisk // what a send mirrors, and a target serves over NBD
	board  *status.Board
	log    *zap.Logger

	mu      sync.Mutex // held for a whole request
	arrived bool       // a target's guest arrived: it runs here and may be sent on
	sent    bool       // a PUT started a migration: this runner is a source
	resumed bool       // the source resumed its guest after a completed send
}

// Migrator is the hypervisor's migration; nil when the provider cannot migrate.
func (mig *Migration) Migrator() hypervisor.Migrator { return mig.m }

// Waiting reports whether this runner is a target still waiting for its guest.
func (mig *Migration) Waiting() bool { return mig.target && !mig.arrived }

// SetArrived records that a target's guest arrived; from then on it is this runner's guest,
// which a later migration may send on.
func (mig *Migration) SetArrived() {
	mig.mu.Lock()
	mig.arrived = true
	mig.mu.Unlock()
}

// Sending reports whether a PUT started a migration from here.
func (mig *Migration) Sending() bool {
	if mig == nil {
		return false
	}
	mig.mu.Lock()
	defer mig.mu.Unlock()
	return mig.sent
}

// NewMigration is hv's migration as cfg allows it.
func NewMigration(cfg runnerconfig.Config, hv hypervisor.Hypervisor, board *status.Board, log *zap.Logger) *Migration {
	mig := &Migration{target: cfg.Incoming, board: board, log: log}
	if cfg.ControlSocket != "" {
		mig.ctlDir = filepath.Dir(cfg.ControlSocket)
	}
	if m, ok := hv.(hypervisor.Migrator); ok {
		mig.m = m
	}
	mig.disks, mig.refuse = mirrorDisks(cfg, diskimage.SupportsDirectIO)
	return mig
}

// mirrorDisks is what a migration copies of the guest's disks: the root disk's overlay (its
// base is the image both sides have), each empty disk whole, and each writable claim as its
// migrate mode says. A writable claim without one makes the guest not migratable (refuse), and
// so does a shared file claim whose folder cannot be opened with O_DIRECT (directIO false): its
// disk then runs with cache=writeback, and the target's host could read what the source's page
// cache had not yet written back (QEMU flushes at the switch, but only its own host's cache).
func mirrorDisks(cfg runnerconfig.Config, directIO func(dir string) bool) (disks []hypervisor.MirrorDisk, refuse string) {
	var stuck, cached []string
	claim := func(drive string, d runnerconfig.Disk) {
		switch d.Migrate {
		case runnerconfig.MigrateCopy:
			disks = append(disks, hypervisor.MirrorDisk{Drive: drive, Whole: true})
		case runnerconfig.MigrateShared:
			if d.Kind == runnerconfig.DiskFile && !directIO(d.Path) {
				cached = append(cached, drive)
			}
		default:
			stuck = append(stuck, drive)
		}
	}
	if v := cfg.RootVolume; v != nil {
		claim("root", *v)
	} else {
		disks = append(disks, hypervisor.MirrorDisk{Drive: "root"})
	}
	for _, d := range cfg.Disks {
		switch {
		case d.ReadOnly:
		case d.Kind == runnerconfig.DiskEmpty:
			disks = append(disks, hypervisor.MirrorDisk{Drive: "disk-" + d.Name, Whole: true})
		default:
			claim("disk-"+d.Name, d)
		}
	}
	if len(stuck) > 0 {
		return nil, fmt.Sprintf("live migration cannot carry the writable claims of drives %s: each needs migrate=%s (the target's own claim is filled by mirroring) or migrate=%s (both nodes attach the same volume)",
			strings.Join(stuck, ", "), runnerconfig.MigrateCopy, runnerconfig.MigrateShared)
	}
	if len(cached) > 0 {
		return nil, fmt.Sprintf("live migration cannot hand over the shared claims of drives %s: their file system does not support O_DIRECT, so the disks run with cache=writeback, "+
			"and the target's node could read data the source's page cache still holds; use a file system or a Block claim that supports O_DIRECT", strings.Join(cached, ", "))
	}
	return disks, ""
}

// InSocket and outSocket are the stream's ends in the control directory.
func (mig *Migration) InSocket() string { return filepath.Join(mig.ctlDir, controlapi.MigrateInSocket) }
func (mig *Migration) outSocket() string {
	return filepath.Join(mig.ctlDir, controlapi.MigrateOutSocket)
}

func (mig *Migration) NBDInSocket() string { return filepath.Join(mig.ctlDir, controlapi.NBDInSocket) }

// RemoveInSockets removes a target's listening sockets as its run ends: QEMU listens on both
// and never removes them, and a target whose guest never arrived must leave its control
// directory to the device's next pod clean.
func (mig *Migration) RemoveInSockets() {
	if mig.ctlDir == "" {
		return
	}
	_ = os.Remove(mig.InSocket())
	_ = os.Remove(mig.NBDInSocket())
}
func (mig *Migration) nbdOutSocket() string {
	return filepath.Join(mig.ctlDir, controlapi.NBDOutSocket)
}

// Drives names the disks a send mirrors, which a target serves.
func (mig *Migration) Drives() []string {
	var d []string
	for _, m := range mig.disks {
		d = append(d, m.Drive)
	}
	return d
}

func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Type() == os.ModeSocket
}

// notMigratable answers for a provider that cannot migrate: 501, as the API exists but this
// hypervisor does not implement it (the controller marks such VMs not migratable).
func notMigratable(w http.ResponseWriter) {
	writeJSON(w, http.StatusNotImplemented, MigrationStatus{State: controlapi.MigrationNone,
		Error: "live migration: provider " + runnerconfig.ProviderCloudHypervisor + " cannot migrate a guest; only provider " + runnerconfig.ProviderQEMU + " can"})
}

func (mig *Migration) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+controlapi.MigrationPath, mig.get)
	mux.HandleFunc("PUT "+controlapi.MigrationPath, mig.put)
	mux.HandleFunc("DELETE "+controlapi.MigrationPath, mig.del)
}

// status is the current MigrationStatus; the caller holds mu.
func (mig *Migration) status() (MigrationStatus, error) {
	info, err := mig.m.QueryMigrate()
	if err != nil {
		return MigrationStatus{}, err
	}
	role := ""
	switch {
	case mig.sent:
		role = controlapi.RoleSource
	case mig.target:
		role = controlapi.RoleTarget
	}
	s := info.APIStatus(role)
	if mig.sent && s.State == controlapi.MigrationCompleted && s.TotalTimeMs == 0 {
		// QEMU 7.2 sets "completed" a moment before it computes the total time and downtime
		// (migration_iteration_finish): not done until the figures are in.
		s.State = controlapi.MigrationActive
	}
	if mig.resumed && s.State == controlapi.MigrationCompleted {
		s.State, s.Error = controlapi.MigrationCancelled, resumedNote
	}
	return s, nil
}

func (mig *Migration) get(w http.ResponseWriter, _ *http.Request) {
	if mig.m == nil {
		notMigratable(w)
		return
	}
	mig.mu.Lock()
	defer mig.mu.Unlock()
	s, err := mig.status()
	if err != nil {
		writeJSON(w, migrationCode(err), MigrationStatus{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (mig *Migration) put(w http.ResponseWriter, r *http.Request) {
	if mig.m == nil {
		notMigratable(w)
		return
	}
	req, ok := decodeMigrationRequest(w, r)
	if !ok {
		return
	}
	mig.mu.Lock()
	defer mig.mu.Unlock()
	refuse := func(code int, msg string) {
		s, _ := mig.status()
		s.Error = msg
		writeJSON(w, code, s)
	}
	if code, why := mig.cannotSend(); why != "" {
		refuse(code, why)
		return
	}
	if err := mig.m.SendGuest(req, mig.outSocket(), mig.nbdOutSocket(), mig.disks); err != nil {
		mig.log.Warn("migration not started", zap.Error(err))
		refuse(migrationCode(err), err.Error())
		return
	}
	mig.sent, mig.resumed = true, false
	// QEMU connects to migrate-out.sock asynchronously; until then query-migrate shows the state
	// before the PUT (on a former target its arrival's "completed", which is not this send's).
	// Answer once the send has begun, so no GET ever reports an old state as this one's.
	if err := mig.AwaitBegin(10 * time.Second); err != nil {
		mig.log.Warn("migration did not begin", zap.Error(err))
		refuse(migrationCode(err), err.Error())
		return
	}
	s, err := mig.status()
	if err != nil {
		writeJSON(w, migrationCode(err), MigrationStatus{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusAccepted, s)
}

// decodeMigrationRequest reads a PUT's body, answering a bad one naming the field.
func decodeMigrationRequest(w http.ResponseWriter, r *http.Request) (MigrationRequest, bool) {
	var req MigrationRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, MigrationStatus{Error: "body: " + err.Error() + `; want {"bandwidthMiBps":256,"downtimeLimitMs":300,"autoConverge":true}`})
		return req, false
	}
	var bad []error
	if req.BandwidthMiBps < 0 {
		bad = append(bad, fmt.Errorf("bandwidthMiBps: %d is negative; 0 is the default (%d)", req.BandwidthMiBps, hypervisor.DefaultMigrationBandwidthMiBps))
	}
	if req.DowntimeLimitMs < 0 {
		bad = append(bad, fmt.Errorf("downtimeLimitMs: %d is negative; 0 is QEMU's default (300)", req.DowntimeLimitMs))
	}
	if len(bad) > 0 {
		writeJSON(w, http.StatusUnprocessableEntity, MigrationStatus{Error: oneLine(errors.Join(bad...))})
		return req, false
	}
	return req, true
}

// cannotSend says why the guest cannot be sent now, with the answer's code; "" when it can.
// mig.mu is held.
func (mig *Migration) cannotSend() (int, string) {
	if mig.Waiting() {
		return http.StatusConflict, "this runner is a migration target (--incoming) waiting for its guest; it has none to send"
	}
	if mig.refuse != "" {
		return http.StatusConflict, mig.refuse
	}
	cur, err := mig.status()
	if err != nil {
		return migrationCode(err), err.Error()
	}
	switch st := mig.board.Get().State; {
	case cur.State == controlapi.MigrationActive:
		return http.StatusConflict, "a migration is already active; DELETE cancels it"
	case st == status.StateMigrated:
		return http.StatusConflict, "the guest already migrated away and is paused here; DELETE resumes it"
	case st != status.StateRunning:
		return http.StatusServiceUnavailable, "the guest is " + st + ", not running"
	}
	if out := mig.outSocket(); !isSocket(out) {
		return http.StatusConflict, "nothing listens on " + out + ": the node agent listens there before it asks for a migration"
	}
	if len(mig.disks) > 0 && !isSocket(mig.nbdOutSocket()) {
		return http.StatusConflict, "nothing listens on " + mig.nbdOutSocket() + ": the node agent listens there for the disks' mirrors before it asks for a migration"
	}
	return 0, ""
}

func (mig *Migration) del(w http.ResponseWriter, _ *http.Request) {
	if mig.m == nil {
		notMigratable(w)
		return
	}
	mig.mu.Lock()
	defer mig.mu.Unlock()
	if mig.Waiting() {
		s, _ := mig.status()
		s.Error = "this runner is a migration target waiting for its guest; a target is stopped by deleting its pod"
		writeJSON(w, http.StatusConflict, s)
		return
	}
	s, err := mig.status()
	if err != nil {
		writeJSON(w, migrationCode(err), MigrationStatus{Error: err.Error()})
		return
	}
	switch {
	case s.State == controlapi.MigrationActive:
		if _, err := mig.m.CancelMigration(10 * time.Second); err != nil {
			writeJSON(w, migrationCode(err), MigrationStatus{Role: s.Role, State: s.State, Error: err.Error()})
			return
		}
		mig.log.Info("migration cancelled; the guest runs here")
	case s.State == controlapi.MigrationCompleted:
		// The caller knows the target is dead: the guest lives on here again.
		if err := mig.m.ResumeGuest(); err != nil {
			writeJSON(w, migrationCode(err), MigrationStatus{Role: s.Role, State: s.State, Error: err.Error()})
			return
		}
		mig.resumed = true
		mig.log.Info("guest resumed here after a completed migration")
	}
	if s, err = mig.status(); err != nil {
		writeJSON(w, migrationCode(err), MigrationStatus{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, s)
}

// CancelActive cancels a migration in flight, so a guest powered down here is not also sent.
func (mig *Migration) CancelActive() {
	if mig == nil || mig.m == nil {
		return
	}
	mig.mu.Lock()
	defer mig.mu.Unlock()
	if !mig.sent {
		return
	}
	if s, err := mig.status(); err == nil && s.State == controlapi.MigrationActive {
		_, err := mig.m.CancelMigration(5 * time.Second)
		mig.log.Info("migration cancelled: the runner is stopping", zap.Error(err))
	}
}

func migrationCode(err error) int {
	if errors.Is(err, hypervisor.ErrNotRunning) {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// LogResult logs how a migration ended, with QEMU's figures: RAM and each mirrored disk apart, so
// the log shows which drives travelled.
func (mig *Migration) LogResult(state string) {
	if mig == nil || mig.m == nil {
		return
	}
	info, err := mig.m.QueryMigrate()
	if err != nil {
		mig.log.Info("migration ended", zap.String("state", state), zap.Error(err))
		return
	}
	fields := []zap.Field{zap.String("state", state), zap.Bool("target", mig.target), zap.Int64("downtimeMs", info.Downtime),
		zap.Int64("totalTimeMs", info.TotalTime), zap.String("error", info.ErrorDesc)}
	if info.RAM != nil {
		fields = append(fields, zap.Int64("ramTransferredBytes", info.RAM.Transferred), zap.Int64("ramTotalBytes", info.RAM.Total))
	}
	for _, d := range info.Mirrors {
		fields = append(fields, zap.Int64("mirrored."+d.Drive+".bytes", d.Transferred))
	}
	mig.log.Info("migration ended", fields...)
}

// AwaitBegin waits for QEMU to leave the states a send starts from (none, or an earlier
// migration's completed) for setup, active or a failure.
func (mig *Migration) AwaitBegin(timeout time.Duration) error {
	for end := time.Now().Add(timeout); ; time.Sleep(5 * time.Millisecond) {
		info, err := mig.m.QueryMigrate()
		if err != nil {
			return err
		}
		switch info.Status {
		case "", "none", "completed":
		default:
			return nil
		}
		if time.Now().After(end) {
			_, _ = mig.m.CancelMigration(time.Second)
			return fmt.Errorf("QEMU did not begin sending to %s within %s (status %q)", mig.outSocket(), timeout, info.Status)
		}
	}
}
