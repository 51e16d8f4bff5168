package boot

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/disk/diskimage"
	"github.com/virtpod/virtpod/pkg/disk/volumedisk"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// receives says whether this runner, a migration target, makes disk d for the source's mirror
// to fill: a writable file claim the migration copies (migrate=copy). A Block claim is written
// in place; it has no folder for the markers.
func receives(cfg runnerconfig.Config, d runnerconfig.Disk) bool {
	return cfg.Incoming && d.Kind == runnerconfig.DiskFile && !d.ReadOnly && d.Migrate == runnerconfig.MigrateCopy
}

// receiveRootVolume makes a target's root claim an empty disk of exactly the source's size (a
// mirror needs the same size on both sides): the size the source's fill gave it from the same
// image and --disk-size-mib, or the flag's size-mib when it names one.
func receiveRootVolume(cfg runnerconfig.Config, log *zap.Logger) (hypervisor.Disk, error) {
	v := cfg.RootVolume
	size := v.SizeMiB << 20
	if size == 0 {
		if cfg.RootDisk == "" {
			return hypervisor.Disk{}, fmt.Errorf("--root-volume: a migration target cannot size the root disk it receives: give the root volume size-mib, or --root-disk")
		}
		var err error
		if size, err = volumedisk.FilledSize(cfg.RootDisk, cfg.DiskSizeMiB<<20); err != nil {
			return hypervisor.Disk{}, fmt.Errorf("--root-volume: %w", err)
		}
	}
	disk, err := volumedisk.Receive(v.Path, size, cfg.Name)
	if err != nil {
		return hypervisor.Disk{}, fmt.Errorf("--root-volume: %w", err)
	}
	log.Info("root disk on a claim, for the migration to fill", zap.String("disk", disk), zap.Int64("sizeBytes", size))
	return hypervisor.Disk{Path: disk, Format: diskimage.FormatRaw, Direct: DirectIn(v.Path)}, nil
}

// MarkReceived records, once the guest arrived, that every disk this target received is
// complete: the root claim's as filled (never filled from its image again), each the guest's.
func MarkReceived(cfg runnerconfig.Config) error {
	if v := cfg.RootVolume; v != nil && receives(cfg, *v) {
		size, err := statDisk(v.Path)
		if err != nil {
			return err
		}
		m := &volumedisk.Marker{Image: cfg.RootDisk, ImageFormat: diskimage.FormatRaw, SizeBytes: size, Finished: time.Now().UTC(), Migrated: true}
		if err := volumedisk.Received(v.Path, m); err != nil {
			return fmt.Errorf("root claim: %w", err)
		}
	}
	for _, d := range cfg.Disks {
		if receives(cfg, d) {
			if err := volumedisk.Received(d.Path, nil); err != nil {
				return fmt.Errorf("disk %s: %w", d.Name, err)
			}
		}
	}
	return nil
}

func statDisk(dir string) (int64, error) {
	fi, err := os.Stat(filepath.Join(dir, runnerconfig.DiskFileName))
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
