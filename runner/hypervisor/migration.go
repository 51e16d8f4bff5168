package hypervisor

import "github.com/virtpod/virtpod/pkg/controlapi"

// DefaultMigrationBandwidthMiBps bounds a migration's stream when the request names no bandwidth.
const DefaultMigrationBandwidthMiBps = 256

// MigrationInfo is a migration's progress as a driver reports it. Its shape and Status words
// are QMP's MigrationInfo: QEMU is the one driver that migrates, and it decodes query-migrate
// straight into this; another driver maps its own onto them.
type MigrationInfo struct {
	Status string `json:"status"`
	RAM    *struct {
		Transferred int64 `json:"transferred"`
		Remaining   int64 `json:"remaining"`
		Total       int64 `json:"total"`
	} `json:"ram"`
	Downtime  int64  `json:"downtime"`
	TotalTime int64  `json:"total-time"`
	ErrorDesc string `json:"error-desc"`
	// Mirrors are the disks the migration copies, which query-migrate does not report.
	Mirrors []MirrorProgress `json:"-"`
}

// MirrorProgress is one mirrored disk's copy: bytes done and to do so far (a guest writing
// during the copy adds to both).
type MirrorProgress struct {
	Drive       string
	Transferred int64
	Total       int64
}

// MigrationState maps QEMU's MigrationStatus onto the control API's few states.
func MigrationState(qemuStatus string, target bool) string {
	switch qemuStatus {
	case "", "none":
		if target {
			return controlapi.MigrationWaiting
		}
		return controlapi.MigrationNone
	case "setup":
		// A target listening for its stream: QEMU 7.2 says none, QEMU 9.1 and later setup.
		if target {
			return controlapi.MigrationWaiting
		}
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

// APIStatus is the control API's view of m for a runner in role; bytes add RAM and disk.
func (m MigrationInfo) APIStatus(role string) controlapi.MigrationStatus {
	s := controlapi.MigrationStatus{Role: role, State: MigrationState(m.Status, role == controlapi.RoleTarget),
		DowntimeMs: m.Downtime, TotalTimeMs: m.TotalTime, Error: m.ErrorDesc}
	if m.RAM != nil {
		s.TransferredBytes, s.RemainingBytes, s.TotalBytes = m.RAM.Transferred, m.RAM.Remaining, m.RAM.Total
	}
	for _, d := range m.Mirrors {
		s.Disks = append(s.Disks, d.Drive)
		s.DiskBytes += d.Transferred
		s.TransferredBytes += d.Transferred
		s.RemainingBytes += d.Total - d.Transferred
		s.TotalBytes += d.Total
	}
	return s
}
