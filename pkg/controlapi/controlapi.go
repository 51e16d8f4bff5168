// Package controlapi is the runner's control API on the wire (docs/runner.md): what the runner
// serves on its control socket and the node agent sends, in one place for both.
package controlapi

import (
	"time"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// SizePath is the resource: GET reads the guest's size, PUT asks for a new one.
const SizePath = "/v1/size"

// Size is the control API's view of the guest's size. CPUs are the vCPUs the hypervisor has
// plugged and the guest acknowledged; Memory is boot memory plus what the guest's virtio-mem
// driver really plugged. Error, when set, says why a request was not done.
type Size struct {
	CPUs      int32  `json:"cpus"`
	Memory    string `json:"memory"`
	MaxCPUs   int32  `json:"maxCPUs"`
	MaxMemory string `json:"maxMemory"`
	Pending   bool   `json:"pending"`
	Error     string `json:"error,omitempty"`
}

// SizeRequest is the body of a PUT: the vCPUs and memory (a quantity such as 768Mi) wanted.
type SizeRequest struct {
	CPUs   int32  `json:"cpus"`
	Memory string `json:"memory"`
}

// Live migration (docs/runner.md). The control directory is the one the control socket is in:
// the node agent reaches both sockets there from the host.
const (
	// MigrationPath: PUT on the source starts sending the guest, GET reads either side's
	// progress, DELETE on the source cancels (or, after completion, resumes the guest there).
	MigrationPath = "/v1/migration"
	// MigrateInSocket is where a target's QEMU listens for the stream (-incoming).
	MigrateInSocket = "migrate-in.sock"
	// MigrateOutSocket is where the node agent listens on the source; QEMU connects to it.
	MigrateOutSocket = "migrate-out.sock"
	// NBDInSocket is where a target's QEMU serves its writable disks for the source's mirrors.
	NBDInSocket = "nbd-in.sock"
	// NBDOutSocket is where the node agent listens on the source for its QEMU's NBD
	// connections, one per mirrored disk, each relayed to the target's NBDInSocket.
	NBDOutSocket = "nbd-out.sock"
)

// Migration roles and states of MigrationStatus.
const (
	RoleSource = "source"
	RoleTarget = "target"

	MigrationNone      = "none"
	MigrationWaiting   = "waiting" // a target before its stream arrived
	MigrationActive    = "active"
	MigrationCompleted = "completed"
	MigrationFailed    = "failed"
	MigrationCancelled = "cancelled"
)

// MigrationRequest is the body of a PUT on the source runner: start sending.
type MigrationRequest struct {
	BandwidthMiBps  int64 `json:"bandwidthMiBps,omitempty"`  // 0: the runner's default
	DowntimeLimitMs int64 `json:"downtimeLimitMs,omitempty"` // 0: QEMU's default (300 ms)
	AutoConverge    bool  `json:"autoConverge"`
}

// MigrationStatus is either side's view of a migration, from QEMU's query-migrate and its
// mirror jobs: bytes are the guest's memory and its mirrored disks together; Disks names the
// drives the source mirrors (root, disk-<serial>); DowntimeMs and TotalTimeMs are QEMU's
// figures once completed. Error, when set, says why a migration failed or a request was refused.
type MigrationStatus struct {
	Role             string   `json:"role"`
	State            string   `json:"state"`
	TransferredBytes int64    `json:"transferredBytes"`
	RemainingBytes   int64    `json:"remainingBytes"`
	TotalBytes       int64    `json:"totalBytes"`
	DowntimeMs       int64    `json:"downtimeMs"`
	TotalTimeMs      int64    `json:"totalTimeMs"`
	Disks            []string `json:"disks,omitempty"`
	DiskBytes        int64    `json:"diskBytes,omitempty"` // of TransferredBytes, the mirrors' share
	Error            string   `json:"error,omitempty"`
}

// Terminal reports whether the migration has ended, one way or the other.
func (s MigrationStatus) Terminal() bool {
	switch s.State {
	case MigrationCompleted, MigrationFailed, MigrationCancelled:
		return true
	}
	return false
}

// GuestPath is the resource of the guest agent (GET): what qemu-guest-agent in the guest says.
const GuestPath = "/v1/guest"

// Guest is the guest agent's answer, and, as JSON, the runner pod's guest-facts annotation
// (vmv1.AnnotationGuestFacts). Channel is false for a guest without an agent channel;
// Connected says an agent answered; Error says why not, when something failed.
type Guest struct {
	Channel    bool                  `json:"channel"`
	Connected  bool                  `json:"connected"`
	OS         *vmv1.GuestOSInfo     `json:"os,omitempty"`
	Hostname   string                `json:"hostname,omitempty"`
	Interfaces []vmv1.GuestInterface `json:"interfaces,omitempty"`
	Bootstrap  *vmv1.GuestBootstrap  `json:"bootstrap,omitempty"`
	Error      string                `json:"error,omitempty"`
}

// SuspendPath is the resource of a suspend: PUT saves the guest's state to the runner's
// --suspend-to and ends the runner once it is saved; GET reads where it stands.
const SuspendPath = "/v1/suspend"

// Suspend states.
const (
	SuspendNone   = "none"
	SuspendSaving = "saving"
	SuspendSaved  = "saved"
	SuspendFailed = "failed"
)

// SuspendStatus is where a suspend stands: Bytes is the size of the saved state; Error says
// why a suspend failed or was refused (the guest then runs on, unchanged).
type SuspendStatus struct {
	State string `json:"state"`
	Bytes int64  `json:"bytes,omitempty"`
	Error string `json:"error,omitempty"`
}

// StartedPath is the guest's start (GET): the runner answers once the guest runs, once it can
// no longer start, or after ?waitSeconds= (at most MaxStartedWaitSeconds) with where it stands.
const StartedPath = "/v1/started"

// MaxStartedWaitSeconds bounds how long one GET of StartedPath waits.
const MaxStartedWaitSeconds = 60

// Started is the answer on StartedPath: whether the guest runs (and since when), whether the
// runner ended without starting it (it stops or failed: it never will), and the runner's state
// (its /status states: preparing, starting, incoming, running, ...), and the machine type it
// runs.
type Started struct {
	Started bool      `json:"started"`
	Ended   bool      `json:"ended,omitempty"`
	State   string    `json:"state"`
	Since   time.Time `json:"since,omitzero"`
	// Machine is the machine type the guest runs on, as the runner resolved it (QEMU's q35 is
	// its own release's newest, pc-q35-10.0 on QEMU 10.0): what the controller pins for the
	// guest's later pods (status.machine). "" from providers without one, or runners before it.
	Machine string `json:"machine,omitempty"`
}

// StatsPath is the guest's counters: GET answers Stats, read from the hypervisor at that moment
// (the node agent's per-VM metrics ask it at each scrape).
const StatsPath = "/v1/stats"

// Stats are a running guest's counters since its hypervisor started (a migrated guest's start
// here). Counters only grow during one hypervisor's life; a reader that sees one fall saw a new
// hypervisor.
type Stats struct {
	// CPUSeconds is the CPU time the hypervisor process used (user and system), the guest's
	// vCPUs and the device emulation together.
	CPUSeconds float64 `json:"cpuSeconds"`
	// MemoryBytes is the memory the guest was given (boot memory and what was plugged since).
	MemoryBytes int64 `json:"memoryBytes"`
	// Disks are the guest's virtio disks by drive (root, cidata, disk-<name>).
	Disks []DiskStats `json:"disks,omitempty"`
	// Network is the guest's network device as its tap counts it: what the guest sent is the
	// tap's received (Tx here is the guest's transmit). Nil for a guest without a network.
	Network *NetworkStats `json:"network,omitempty"`
	// Error says why the counters could not be read (the guest is not running yet, say).
	Error string `json:"error,omitempty"`
}

// DiskStats are one disk's counters, as the hypervisor's block layer counts the guest's
// requests.
type DiskStats struct {
	Drive      string `json:"drive"`
	ReadBytes  int64  `json:"readBytes"`
	WriteBytes int64  `json:"writeBytes"`
	ReadOps    int64  `json:"readOps"`
	WriteOps   int64  `json:"writeOps"`
}

// NetworkStats are the guest's network counters, from the guest's point of view.
type NetworkStats struct {
	RxBytes   int64 `json:"rxBytes"`
	TxBytes   int64 `json:"txBytes"`
	RxPackets int64 `json:"rxPackets"`
	TxPackets int64 `json:"txPackets"`
}

// ScreenshotPath is the guest's screen: GET answers a PNG of its display, or 409 when the guest
// has no display (--display=none) or is not running.
const ScreenshotPath = "/v1/screenshot"
