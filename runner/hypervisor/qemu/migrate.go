package qemu

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// QEMU live migration through QMP (docs/runner.md): the source sends RAM and its root overlay
// (block migration, incremental: the target made its own overlay on the same base, so only the
// overlay's clusters travel) to a unix socket the node agent listens on; the target was started
// with -incoming and stays paused until the runner sees the stream completed and resumes it.

// QueryMigrate is where QEMU's migration stands (query-migrate).
func (q *VM) QueryMigrate() (hypervisor.MigrationInfo, error) {
	var m hypervisor.MigrationInfo
	err := q.qmpRun("query-migrate", nil, &m)
	return m, err
}

// MigrationEvents turns on QEMU's MIGRATION events, which the supervisor acts on (a target
// resumes its guest on "completed", a source reports itself migrated).
func (q *VM) MigrationEvents() error {
	return q.qmpRun("migrate-set-capabilities", map[string]any{"capabilities": []map[string]any{
		{"capability": "events", "state": true},
	}}, nil)
}

// SendGuest starts the migration to the unix socket at sock and returns once QEMU took it.
func (q *VM) SendGuest(req controlapi.MigrationRequest, sock string) error {
	caps := []map[string]any{
		{"capability": "events", "state": true},
		{"capability": "auto-converge", "state": req.AutoConverge},
		// Block migration copies every writable drive the guest has: here only the root overlay
		// (the runner refuses a guest with other writable disks); read-only drives such as the
		// cloud-init seed are skipped (checked on QEMU 7.2 by migrate_e2e_test.go).
		{"capability": "block", "state": true},
	}
	if err := q.qmpRun("migrate-set-capabilities", map[string]any{"capabilities": caps}, nil); err != nil {
		return err
	}
	bw := req.BandwidthMiBps
	if bw <= 0 {
		bw = hypervisor.DefaultMigrationBandwidthMiBps
	}
	params := map[string]any{"max-bandwidth": bw << 20, "block-incremental": true}
	if req.DowntimeLimitMs > 0 {
		params["downtime-limit"] = req.DowntimeLimitMs
	}
	if err := q.qmpRun("migrate-set-parameters", params, nil); err != nil {
		return err
	}
	q.log.Info("migrating the guest", zap.String("to", sock), zap.Int64("bandwidthMiBps", bw),
		zap.Int64("downtimeLimitMs", req.DowntimeLimitMs), zap.Bool("autoConverge", req.AutoConverge))
	return q.qmpRun("migrate", map[string]any{"uri": "unix:" + sock}, nil)
}

// CancelMigration stops an active migration; the guest keeps running here. It returns once
// QEMU left the active states, or after timeout.
func (q *VM) CancelMigration(timeout time.Duration) (hypervisor.MigrationInfo, error) {
	if err := q.qmpRun("migrate_cancel", nil, nil); err != nil {
		return hypervisor.MigrationInfo{}, err
	}
	for end := time.Now().Add(timeout); ; {
		m, err := q.QueryMigrate()
		if err != nil || hypervisor.MigrationState(m.Status, false) != controlapi.MigrationActive || time.Now().After(end) {
			return m, err
		}
		time.Sleep(resizePoll)
	}
}

// ResumeGuest lets a guest paused by a completed migration (or a target's arrived one) run.
func (q *VM) ResumeGuest() error {
	if err := q.qmpRun("cont", nil, nil); err != nil {
		return fmt.Errorf("resume the guest: %w", err)
	}
	return nil
}

var _ hypervisor.Migrator = (*VM)(nil)
