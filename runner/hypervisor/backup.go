package hypervisor

import (
	"context"
	"errors"

	"github.com/virtpod/virtpod/pkg/controlapi"
)

// Backuper is a hypervisor that can copy its running guest's drives, as they were at one
// instant, onto targets the caller serves over NBD (docs/runner.md, Backups), without stopping
// the guest.
type Backuper interface {
	// Backup copies req's drives onto the NBD servers at the sockets req names in controlDir
	// and returns once every copy is complete and its target disconnected, or failed (then the
	// drives keep the bitmaps they had, and the new one is gone). quiesce, when not nil, is
	// called just before the instant, and the function it returns just after it, whatever
	// happened. The status has the drives' figures and the bitmap; its consistency is the
	// caller's, who quiesced. A request the guest cannot serve is a *BackupRefusal.
	Backup(ctx context.Context, controlDir string, req controlapi.BackupRequest, quiesce func() (thaw func())) (controlapi.BackupStatus, error)
	// Drives are the guest's drives with their sizes: a backup's targets must be exactly as
	// large as their drives.
	Drives(ctx context.Context) ([]controlapi.Drive, error)
}

// BackupRefusal is a backup the hypervisor refused before it copied anything, in words that
// name the drive and the fix: an unknown or read-only drive, a bitmap a drive does not have, a
// target of the wrong size, another operation under way.
type BackupRefusal struct{ Reason string }

func (e *BackupRefusal) Error() string { return e.Reason }

// IsBackupRefusal reports whether err is a refusal (the control API's 409).
func IsBackupRefusal(err error) bool {
	var r *BackupRefusal
	return errors.As(err, &r)
}
