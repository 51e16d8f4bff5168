package volumedisk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// receivingName marks a disk a live migration is filling (runnerconfig.ReceivingMarker).
const receivingName = runnerconfig.ReceivingMarker

// Receiving is what the receiving marker records: which migration target made the disk.
type Receiving struct {
	Target    string    `json:"target"`
	SizeBytes int64     `json:"sizeBytes"`
	Started   time.Time `json:"started"`
}

// Receive makes dir's disk an empty sparse disk of size bytes for a live migration's mirror to
// fill, marked as being received (target names the runner, for the error a later runner
// gives). Only an empty claim is filled: a disk, a fill's marker or its partial copy already
// there is refused, since a migration must never write over a guest's data. The marker goes
// first, so the disk never appears without it.
func Receive(dir string, size int64, target string) (string, error) {
	disk := filepath.Join(dir, runnerconfig.DiskFileName)
	for _, name := range []string{runnerconfig.DiskFileName, markerName, partialName, receivingName} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return disk, fmt.Errorf("the migration target's claim already holds %s: a live migration fills only a new, empty claim, never one with a guest's data; give the target a claim of its own", name)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return disk, err
		}
	}
	if err := writeFileSync(filepath.Join(dir, receivingName), Receiving{Target: target, SizeBytes: size, Started: time.Now().UTC()}); err != nil {
		return disk, err
	}
	if _, err := Ensure(disk, size); err != nil {
		return disk, err
	}
	return disk, syncDir(dir)
}

// Received records that the guest arrived: the disk in dir is complete and the guest's. A root
// disk (populated non-nil) gets the fill's marker too, so that no later runner fills it from
// its image again; then the receiving marker goes.
func Received(dir string, populated *Marker) error {
	if populated != nil {
		if err := writeFileSync(filepath.Join(dir, markerName), populated); err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(dir, receivingName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(dir)
}

// CheckComplete refuses a disk a live migration was still filling when its target ended: its
// data is partial, and booting from it, or filling it again, would hide that.
func CheckComplete(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, receivingName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	return fmt.Errorf("this claim's %s was being copied by a live migration (%s: %s) that never completed here, so it is partial; "+
		"the guest's disk is still on the migration's source claim: delete this claim, or remove %s once you have checked the disk yourself",
		runnerconfig.DiskFileName, receivingName, string(trimNewline(b)), receivingName)
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
