package controlapi

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// BackupPath is a backup of the running guest's drives (docs/runner.md): PUT copies each drive
// the request names, as it was at one instant for all of them, onto a target the caller serves
// over NBD in the runner's control directory, and answers once every copy is done; GET reads the
// last backup's status.
const BackupPath = "/v1/backup"

// BackupRequest is the body of a PUT on BackupPath.
type BackupRequest struct {
	Drives []BackupDrive `json:"drives"`
	// Bitmap is the dirty bitmap to start on every drive at the backup's instant, so the next
	// backup can copy only what changed since (required, [A-Za-z0-9-]{1,63}).
	Bitmap string `json:"bitmap"`
	// Freeze asks the guest agent to freeze the guest's file systems around the instant.
	Freeze bool `json:"freeze,omitempty"`
}

// BackupDrive is one drive of a backup and where its copy goes.
type BackupDrive struct {
	// Drive is the drive's id as the runner names them: "root" or "disk-<name>".
	Drive string `json:"drive"`
	// Socket is a file name (no slash) in the runner's control directory where the target is
	// served over NBD, under the export name Drive. The target is a raw image of the drive's size.
	Socket string `json:"socket"`
	// Since copies only the blocks dirty in this bitmap (the previous backup's Bitmap) onto a
	// target that holds that backup; "" copies the whole drive.
	Since string `json:"since,omitempty"`
}

// Consistency of a backup's copies.
const (
	// ConsistencyGuestFrozen: the guest agent froze the guest's file systems at the instant.
	ConsistencyGuestFrozen = "GuestFrozen"
	// ConsistencyCrash: the copies are what the disks held at the instant, as after a power cut.
	ConsistencyCrash = "CrashConsistent"
)

// Backup states (BackupStatus.State).
const (
	BackupNone      = "none"      // no backup yet in this runner
	BackupRunning   = "running"   // a backup is copying
	BackupCompleted = "completed" // the last backup is complete on its targets
	BackupFailed    = "failed"    // the last backup failed; Error says why
)

// BackupStatus is the answer to a backup, and GET's view of the last one.
type BackupStatus struct {
	// State is where the backup stands (GET while one runs: BackupRunning).
	State       string `json:"state,omitempty"`
	Consistency string `json:"consistency"`
	// FreezeError says why the guest was not frozen when Freeze was asked ("" when it was
	// frozen, or not asked); FrozenFilesystems is how many file systems the agent froze.
	FreezeError       string              `json:"freezeError,omitempty"`
	FrozenFilesystems int                 `json:"frozenFilesystems,omitempty"`
	Drives            []BackupDriveStatus `json:"drives"`
	// Bitmap is the bitmap now tracking the drives' changes since this backup's instant.
	Bitmap string `json:"bitmap"`
	Error  string `json:"error,omitempty"`
}

// BackupDriveStatus is one drive's copy: Size is the drive's size, Copied the bytes the copy
// went through (the whole drive for a full copy, the blocks dirty since the last backup for an
// incremental one).
type BackupDriveStatus struct {
	Drive       string `json:"drive"`
	Size        int64  `json:"size"`
	Copied      int64  `json:"copied"`
	Incremental bool   `json:"incremental"`
}

// MaxBackupDrives bounds the drives of one request.
const MaxBackupDrives = 64

var bitmapName = regexp.MustCompile(`^[A-Za-z0-9-]{1,63}$`)

// Validate checks a request's form, naming each bad field: what it names is checked against the
// guest's drives later.
func (r BackupRequest) Validate() error {
	var errs []error
	if !bitmapName.MatchString(r.Bitmap) {
		errs = append(errs, fmt.Errorf("bitmap: %q is not a name of 1 to 63 letters, digits and '-'", r.Bitmap))
	}
	switch n := len(r.Drives); {
	case n == 0:
		errs = append(errs, errors.New("drives: none named; name each drive to back up and its target's socket"))
	case n > MaxBackupDrives:
		errs = append(errs, fmt.Errorf("drives: %d named, at most %d", n, MaxBackupDrives))
	}
	seen := map[string]bool{}
	for i, d := range r.Drives {
		errs = append(errs, d.validate(fmt.Sprintf("drives[%d]", i), r.Bitmap)...)
		if seen[d.Drive] {
			errs = append(errs, fmt.Errorf("drives[%d].drive: %s is named twice", i, d.Drive))
		}
		seen[d.Drive] = true
	}
	return errors.Join(errs...)
}

func (d BackupDrive) validate(field, bitmap string) []error {
	var errs []error
	if d.Drive == "" || len(d.Drive) > 128 || strings.ContainsAny(d.Drive, "/\x00") {
		errs = append(errs, fmt.Errorf("%s.drive: %q is not a drive id such as root or disk-<name>", field, d.Drive))
	}
	if d.Socket == "" || d.Socket == "." || d.Socket == ".." || len(d.Socket) > 64 || strings.ContainsAny(d.Socket, "/\x00") {
		errs = append(errs, fmt.Errorf("%s.socket: %q is not a file name (no slash) in the control directory", field, d.Socket))
	}
	switch {
	case d.Since == "":
	case !bitmapName.MatchString(d.Since):
		errs = append(errs, fmt.Errorf("%s.since: %q is not a bitmap name (1 to 63 letters, digits and '-')", field, d.Since))
	case d.Since == bitmap:
		errs = append(errs, fmt.Errorf("%s.since: %q is also the new bitmap's name; name the new one anew", field, d.Since))
	}
	return errs
}
