package runner

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
)

// QEMU live migration through QMP (docs/runner.md): the source sends RAM and its root overlay
// (block migration, incremental: the target made its own overlay on the same base, so only the
// overlay's clusters travel) to a unix socket the node agent listens on; the target was started
// with -incoming and stays paused until the runner sees the stream completed and resumes it.

// DefaultMigrationBandwidthMiBps bounds a migration's stream when the request names no bandwidth.
const DefaultMigrationBandwidthMiBps = 256

// migrationStatus is QMP's MigrationInfo, the fields the control API reports.
type migrationInfo struct {
	Status string `json:"status"`
	RAM    *struct {
		Transferred int64 `json:"transferred"`
		Remaining   int64 `json:"remaining"`
		Total       int64 `json:"total"`
	} `json:"ram"`
	Disk *struct {
		Transferred int64 `json:"transferred"`
		Remaining   int64 `json:"remaining"`
		Total       int64 `json:"total"`
	} `json:"disk"`
	Downtime  int64  `json:"downtime"`
	TotalTime int64  `json:"total-time"`
	ErrorDesc string `json:"error-desc"`
}

// migrationState maps QEMU's MigrationStatus onto the control API's few states.
func migrationState(qemuStatus string, target bool) string {
	switch qemuStatus {
	case "", "none":
		if target {
			return controlapi.MigrationWaiting
		}
		return controlapi.MigrationNone
	case "completed":
		return controlapi.MigrationCompleted
	case "failed":
		return controlapi.MigrationFailed
	case "cancelled":
		return controlapi.MigrationCancelled
	}
	// setup, active, pre-switchover, device, cancelling, wait-unplug, postcopy-*, colo
	return controlapi.MigrationActive
}

func (m migrationInfo) status(role string) controlapi.MigrationStatus {
	s := controlapi.MigrationStatus{Role: role, State: migrationState(m.Status, role == controlapi.RoleTarget),
		DowntimeMs: m.Downtime, TotalTimeMs: m.TotalTime, Error: m.ErrorDesc}
	if m.RAM != nil {
		s.TransferredBytes, s.RemainingBytes, s.TotalBytes = m.RAM.Transferred, m.RAM.Remaining, m.RAM.Total
	}
	if m.Disk != nil {
		s.TransferredBytes += m.Disk.Transferred
		s.RemainingBytes += m.Disk.Remaining
		s.TotalBytes += m.Disk.Total
	}
	return s
}

func (q *qemuVM) queryMigrate() (migrationInfo, error) {
	var m migrationInfo
	err := q.qmpRun("query-migrate", nil, &m)
	return m, err
}

// migrationEvents turns on QEMU's MIGRATION events, which the supervisor acts on (a target
// resumes its guest on "completed", a source reports itself migrated).
func (q *qemuVM) migrationEvents() error {
	return q.qmpRun("migrate-set-capabilities", map[string]any{"capabilities": []map[string]any{
		{"capability": "events", "state": true},
	}}, nil)
}

// sendGuest starts the migration to the unix socket at sock and returns once QEMU took it.
func (q *qemuVM) sendGuest(req controlapi.MigrationRequest, sock string) error {
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
		bw = DefaultMigrationBandwidthMiBps
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

// cancelMigration stops an active migration; the guest keeps running here. It returns once
// QEMU left the active states, or after timeout.
func (q *qemuVM) cancelMigration(timeout time.Duration) (migrationInfo, error) {
	if err := q.qmpRun("migrate_cancel", nil, nil); err != nil {
		return migrationInfo{}, err
	}
	for end := time.Now().Add(timeout); ; {
		m, err := q.queryMigrate()
		if err != nil || migrationState(m.Status, false) != controlapi.MigrationActive || time.Now().After(end) {
			return m, err
		}
		time.Sleep(resizePoll)
	}
}

// resumeGuest lets a guest paused by a completed migration (or a target's arrived one) run.
func (q *qemuVM) resumeGuest() error {
	if err := q.qmpRun("cont", nil, nil); err != nil {
		return fmt.Errorf("resume the guest: %w", err)
	}
	return nil
}
