package qemu

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// QEMU live migration through QMP (docs/runner.md): the source sends RAM to a unix socket the
// node agent listens on, after mirroring its writable disks over NBD (mirror.go); the target was
// started with -incoming and stays paused until the runner sees the stream completed and
// resumes it.

// QueryMigrate is where QEMU's migration stands (query-migrate), with the current send's
// mirrors.
func (q *VM) QueryMigrate() (hypervisor.MigrationInfo, error) {
	var m hypervisor.MigrationInfo
	if err := q.qmpRun("query-migrate", nil, &m); err != nil {
		return m, err
	}
	if s := q.current(); s != nil {
		s.report(&m)
	}
	return m, nil
}

// current is the latest send from this QEMU, nil before any.
func (q *VM) current() *send {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	return q.cur
}

// MigrationEvents turns on QEMU's MIGRATION events, which the supervisor acts on (a target
// resumes its guest on "completed", a source reports itself migrated).
func (q *VM) MigrationEvents() error {
	return q.qmpRun("migrate-set-capabilities", map[string]any{"capabilities": []map[string]any{
		{"capability": "events", "state": true},
	}}, nil)
}

// SendGuest starts the migration to the unix socket at sock, mirroring disks through nbdSock
// first, and returns once QEMU took it: with disks, once their mirrors started (a target that
// does not answer fails the request here); the rest runs in drive.
func (q *VM) SendGuest(req controlapi.MigrationRequest, sock, nbdSock string, disks []hypervisor.MirrorDisk) error {
	if prev := q.current(); prev != nil {
		select {
		case <-prev.done:
		default:
			return fmt.Errorf("the previous migration's mirrors are still being cleaned up")
		}
	}
	caps := []map[string]any{
		{"capability": "events", "state": true},
		{"capability": "auto-converge", "state": req.AutoConverge},
		// Paused before the switch, the source completes its mirrors: the target's disks are
		// in sync before its guest can run.
		{"capability": "pause-before-switchover", "state": len(disks) > 0},
	}
	if err := q.qmpRun("migrate-set-capabilities", map[string]any{"capabilities": caps}, nil); err != nil {
		return err
	}
	bw := req.BandwidthMiBps
	if bw <= 0 {
		bw = hypervisor.DefaultMigrationBandwidthMiBps
	}
	params := map[string]any{"max-bandwidth": bw << 20}
	if req.DowntimeLimitMs > 0 {
		params["downtime-limit"] = req.DowntimeLimitMs
	}
	if err := q.qmpRun("migrate-set-parameters", params, nil); err != nil {
		return err
	}
	drives := make([]string, 0, len(disks))
	for _, d := range disks {
		drives = append(drives, d.Drive)
	}
	q.log.Info("migrating the guest", zap.String("to", sock), zap.Int64("bandwidthMiBps", bw),
		zap.Int64("downtimeLimitMs", req.DowntimeLimitMs), zap.Bool("autoConverge", req.AutoConverge), zap.Strings("mirroring", drives))
	s := &send{disks: disks, capped: req.BandwidthMiBps > 0, events: make(chan string, 16), stop: make(chan struct{}), done: make(chan struct{}), mirroring: len(disks) > 0}
	q.sendMu.Lock()
	q.cur = s
	q.sendMu.Unlock()
	if len(disks) == 0 && q.spec.Acceleration != "tcg" {
		close(s.done)
		return q.qmpRun("migrate", map[string]any{"uri": "unix:" + sock}, nil)
	}
	if err := q.startMirrors(s, nbdSock, bw<<20); err != nil {
		q.abortMirrors(s)
		s.fail(err)
		close(s.done)
		return err
	}
	go q.drive(s, "unix:"+sock)
	return nil
}

// migrationEvent passes a MIGRATION status to the send that waits for its switch.
func (q *VM) migrationEvent(status string) {
	if s := q.current(); s != nil {
		select {
		case s.events <- status:
		default: // drive polls too
		}
	}
}

// CancelMigration stops an active migration, mirrors included; the guest keeps running here.
// It returns once QEMU left the active states and the mirrors are gone, or after timeout.
func (q *VM) CancelMigration(timeout time.Duration) (hypervisor.MigrationInfo, error) {
	end := time.Now().Add(timeout)
	s := q.current()
	if s != nil {
		s.cancel()
	}
	if err := q.qmpRun("migrate_cancel", nil, nil); err != nil {
		return hypervisor.MigrationInfo{}, err
	}
	if s != nil {
		select {
		case <-s.done:
		case <-time.After(time.Until(end)):
		}
	}
	for {
		m, err := q.QueryMigrate()
		if err != nil || hypervisor.MigrationState(m.Status, false) != controlapi.MigrationActive || time.Now().After(end) {
			return m, err
		}
		time.Sleep(resizePoll)
	}
}

// ListenIncoming has QEMU, started with "-incoming defer", listen on its incoming socket.
func (q *VM) ListenIncoming() error {
	if err := q.qmpRun("migrate-incoming", map[string]any{"uri": q.spec.IncomingURI()}, nil); err != nil {
		return fmt.Errorf("listening for the incoming guest on %s: %w", q.spec.IncomingSocket, err)
	}
	return nil
}

// ResumeGuest lets a guest paused by a completed migration (or a target's arrived one) run.
func (q *VM) ResumeGuest() error {
	if err := q.qmpRun("cont", nil, nil); err != nil {
		return fmt.Errorf("resume the guest: %w", err)
	}
	return nil
}

var _ hypervisor.Migrator = (*VM)(nil)
