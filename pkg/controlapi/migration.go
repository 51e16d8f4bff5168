package controlapi

// Live migration (docs/runner.md): the node agent PUTs a MigrationRequest on the source runner
// once it listens on MigrateOutSocket; GET reads either side's MigrationStatus; DELETE on the
// source cancels an active send, or resumes the guest after a completed one.

// MigrationPath is the migration resource of the control API.
const MigrationPath = "/v1/migration"

// Sockets in the runner's control directory: the target's QEMU listens on MigrateInSocket
// (-incoming); the source's node agent listens on MigrateOutSocket and the source QEMU connects.
const (
	MigrateInSocket  = "migrate-in.sock"
	MigrateOutSocket = "migrate-out.sock"
)

// MigrationRequest is the body of a PUT on the source runner: start sending.
type MigrationRequest struct {
	// BandwidthMiBps caps the stream; 0 is the runner's default.
	BandwidthMiBps int64 `json:"bandwidthMiBps,omitempty"`
	// DowntimeLimitMs is the longest pause allowed at the switch; 0 is QEMU's default.
	DowntimeLimitMs int64 `json:"downtimeLimitMs,omitempty"`
	AutoConverge    bool  `json:"autoConverge"`
}

// Migration roles and states of MigrationStatus.
const (
	MigrationRoleSource = "source"
	MigrationRoleTarget = "target"

	MigrationNone      = "none"
	MigrationWaiting   = "waiting" // a target before its stream arrives
	MigrationActive    = "active"
	MigrationCompleted = "completed"
	MigrationFailed    = "failed"
	MigrationCancelled = "cancelled"
)

// MigrationStatus is a runner's answer on either side.
type MigrationStatus struct {
	Role             string `json:"role"`
	State            string `json:"state"`
	TransferredBytes int64  `json:"transferredBytes"`
	RemainingBytes   int64  `json:"remainingBytes"`
	TotalBytes       int64  `json:"totalBytes"`
	DowntimeMs       int64  `json:"downtimeMs"`
	TotalTimeMs      int64  `json:"totalTimeMs"`
	Error            string `json:"error,omitempty"`
}

// Terminal says whether the state is an end: completed, failed or cancelled.
func (s MigrationStatus) Terminal() bool {
	return s.State == MigrationCompleted || s.State == MigrationFailed || s.State == MigrationCancelled
}
