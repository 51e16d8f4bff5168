// Package hypervisor is what the runner and its hypervisor drivers share: the interfaces a
// driver implements (boot and supervise, resize, migrate, the screen, the counters), the events
// it reports, and the process helper every driver runs its binary with. Each driver is a
// subpackage (qemu, cloudhypervisor) and imports only this one of the runner's packages, so a
// new hypervisor, or a second QEMU version, is a new driver rather than edits across the runner.
package hypervisor

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/virtpod/virtpod/pkg/controlapi"
)

// EventKind is something the runner learns about the guest.
type EventKind int

const (
	EventRunning          EventKind = iota // the guest's vCPUs run
	EventPaused                            // the guest stopped running (an I/O error, a debugger, ...)
	EventShutdown                          // the hypervisor is shutting down; Guest says whether the guest asked
	EventPanicked                          // the guest kernel reported a panic
	EventNoBootableDevice                  // the firmware found nothing to boot on the root disk
	EventMigration                         // a live migration changed state; Reason is QEMU's status
)

func (k EventKind) String() string {
	return [...]string{"running", "paused", "shutdown", "panicked", "no bootable device", "migration"}[k]
}

type Event struct {
	Kind   EventKind
	Guest  bool   // for EventShutdown: the guest initiated it
	Reason string // the hypervisor's own words
}

// Hypervisor is one provider's guest. Start launches the hypervisor with the guest not yet
// running, so the runner can attach the console before any output; Resume lets it run. Exited
// is closed when the hypervisor process has exited and every event it sent has been delivered.
type Hypervisor interface {
	Start(ctx context.Context) error
	Resume(ctx context.Context) error
	Version() string
	Events() <-chan Event
	Powerdown(ctx context.Context) error
	Quit(ctx context.Context) error
	Exited() <-chan struct{}
	// ExitDetail describes how the process ended, with the end of its stderr.
	ExitDetail() string
	// Kill ends the process at once; used when the runner itself fails.
	Kill()
	// Hotplug brings the guest's hotplug slots to req (docs/hotplug.md), attaching disks served
	// over NBD on sockets in controlDir, and returns what the guest has then; a disk it could not
	// attach or the guest did not release is in the status's errors. Hotplugged only reads it.
	// A hypervisor without disk hotplug answers ErrUnsupported.
	Hotplug(ctx context.Context, controlDir string, req controlapi.HotplugRequest) (controlapi.HotplugStatus, error)
	Hotplugged(ctx context.Context) (controlapi.HotplugStatus, error)
}

// AgentChannel is a hypervisor that gives the guest a channel for its guest agent.
type AgentChannel interface {
	// AgentChannelOpen says whether the guest has the agent's port open: an agent listens.
	AgentChannelOpen(ctx context.Context) (bool, error)
}

// Saver is a hypervisor that can save its guest's state for a later start to load (suspend).
type Saver interface {
	// SaveGuest pauses the guest and streams its state to the unix socket at sock; the
	// Migrator's QueryMigrate follows it.
	SaveGuest(sock string) error
}

// Resizer is a hypervisor that can change a running guest's size.
type Resizer interface {
	// GuestSize is what the guest has now.
	GuestSize(ctx context.Context) (cpus int32, memoryMiB int64, err error)
	// Resize plugs or unplugs towards the target and returns once the guest has it, or with
	// ctx's error when it did not take it in time.
	Resize(ctx context.Context, cpus int32, memoryMiB int64) error
}

// Migrator is a hypervisor that can send its guest to another runner, or receive one. Disks
// travel by NBD mirroring (docs/runner.md): the target exports its writable disks, the source
// mirrors each onto the target's export until they are in sync, then sends memory, and
// completes the mirrors with its guest paused just before the switch.
type Migrator interface {
	QueryMigrate() (MigrationInfo, error)
	// MigrationEvents turns on EventMigration, which the supervisor acts on.
	MigrationEvents() error
	// SendGuest starts sending the guest to the unix socket at sock, mirroring disks through
	// NBD connections to nbdSock first. It returns once the mirrors and the send are under
	// way; QueryMigrate follows both.
	SendGuest(req controlapi.MigrationRequest, sock, nbdSock string, disks []MirrorDisk) error
	// CancelMigration stops an active migration and returns once it is over, or after timeout.
	CancelMigration(timeout time.Duration) (MigrationInfo, error)
	// ExportDisks makes a waiting target serve drives, writable, over NBD on the unix socket
	// at sock, for the source's mirrors.
	ExportDisks(sock string, drives []string) error
	// StopExports ends the target's NBD exports: its guest arrived and is about to run.
	StopExports() error
	// ListenIncoming makes a waiting target listen for the guest's stream, once its disks
	// are served (ExportDisks).
	ListenIncoming() error
	// ResumeGuest lets a guest paused by a completed migration run.
	ResumeGuest() error
}

// MirrorDisk is one disk a migration copies: its drive (root, disk-<serial>), and whether the
// whole disk is copied or only its top overlay (the target has the same read-only base).
type MirrorDisk struct {
	Drive string
	Whole bool
}

// ErrNotRunning: the hypervisor has not started yet, or has ended. ErrRefused: the hypervisor
// cannot make this change. ErrUnsupported: this hypervisor has no such operation.
var (
	ErrNotRunning  = errors.New("the guest is not running")
	ErrRefused     = errors.New("the hypervisor refused the resize")
	ErrUnsupported = errors.New("not supported by this hypervisor")
)

// Quantity writes MiB as Kubernetes does: "768Mi", "1Gi".
func Quantity(mib int64) string { return resource.NewQuantity(mib<<20, resource.BinarySI).String() }
