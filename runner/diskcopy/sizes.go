package diskcopy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// SizesName is the file in the control directory where the node agent writes each drive's size
// (JSON, bytes by drive id) for targets given without size=: only the running guest's QEMU knows
// them exactly, and it copies a drive only onto a target of exactly its size.
const SizesName = "targets.json"

// sized fills in the targets without a size from SizesName, waiting at most within for the
// node agent to write it.
func sized(ctx context.Context, controlDir string, targets []TargetSpec, within time.Duration, log *zap.Logger) ([]TargetSpec, error) {
	missing := false
	for _, t := range targets {
		missing = missing || t.Size == 0
	}
	if !missing {
		return targets, nil
	}
	if within <= 0 {
		within = 5 * time.Minute
	}
	path := filepath.Join(controlDir, SizesName)
	log.Info("waiting for the node agent to give the drives' sizes", zap.String("file", path))
	sizes, err := waitSizes(ctx, path, within)
	if err != nil {
		return nil, err
	}
	out := append([]TargetSpec(nil), targets...)
	for i := range out {
		if out[i].Size != 0 {
			continue
		}
		n, ok := sizes[out[i].Drive]
		if !ok || n <= 0 {
			return nil, fmt.Errorf("%s gives no size for drive %s (it gives %v): the node agent and the controller disagree on the disks; take the snapshot again", path, out[i].Drive, sizes)
		}
		if err := checkSectors(path+" drive "+out[i].Drive, n); err != nil {
			return nil, err
		}
		if fi, err := os.Stat(out[i].Base); out[i].Base != "" && err == nil && fi.Size() != n {
			return nil, refuse("drive %s: base %s is %d bytes and the drive %d: a base must be the same drive's earlier snapshot, of the drive's size (take a full snapshot after a resize)", out[i].Drive, out[i].Base, fi.Size(), n)
		}
		out[i].Size = n
	}
	return out, nil
}

func waitSizes(ctx context.Context, path string, within time.Duration) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		raw, err := os.ReadFile(path)
		if err == nil {
			var sizes map[string]int64
			if err := json.Unmarshal(raw, &sizes); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			return sizes, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return nil, fmt.Errorf("the node agent wrote no %s within %s: is the VM's runner pod on this node, and its agent running?", path, within)
			}
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}
