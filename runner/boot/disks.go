package boot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/disk/diskfile"
	"github.com/virtpod/virtpod/pkg/disk/diskimage"
	"github.com/virtpod/virtpod/pkg/disk/isodisk"
	"github.com/virtpod/virtpod/pkg/disk/volumedisk"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/hypervisor"
	"github.com/virtpod/virtpod/runner/status"
)

// DirectIn says whether a disk in dir is opened with O_DIRECT: where the file system supports
// it, so the guest's writes are not cached twice; through the page cache elsewhere (tmpfs).
// Either way the guest's flushes reach the disk as fdatasync, so data a guest synced is on the
// volume when it returns, and survives the hypervisor's death, the pod's deletion and, on a disk
// that keeps its data, the node's.
func DirectIn(dir string) bool { return diskimage.SupportsDirectIO(dir) }

// rootVolume readies a root disk kept on a claim (--root-volume): a Block claim is the
// disk; on a Filesystem claim the disk is a file, filled once from the --root-disk image when
// the claim holds none. The guest boots from it directly, without an overlay.
func rootVolume(ctx context.Context, cfg runnerconfig.Config, qemuImg string, board *status.Board, log *zap.Logger) (hypervisor.Disk, error) {
	v := cfg.RootVolume
	if v.Kind == runnerconfig.DiskBlock {
		if err := isBlockDevice(v.Path); err != nil {
			return hypervisor.Disk{}, fmt.Errorf("--root-volume: %w", err)
		}
		log.Info("root disk on a Block claim", zap.String("device", v.Path))
		return hypervisor.Disk{Path: v.Path, Format: diskimage.FormatRaw, Block: true, Direct: true}, nil
	}
	disk := filepath.Join(v.Path, runnerconfig.DiskFileName)
	if receives(cfg, *v) {
		return receiveRootVolume(cfg, log)
	}
	if cfg.RootDisk == "" {
		if err := volumedisk.CheckComplete(v.Path); err != nil {
			return hypervisor.Disk{}, fmt.Errorf("--root-volume: %w", err)
		}
		if _, err := os.Stat(disk); err != nil {
			return hypervisor.Disk{}, fmt.Errorf("--root-volume: the claim holds no %s and there is no image to fill it with: give the VM rootDisk.image, or put a raw disk there as %s", runnerconfig.DiskFileName, runnerconfig.DiskFileName)
		}
	} else {
		o := volumedisk.FillOptions{QEMUImg: qemuImg, SizeBytes: cfg.DiskSizeMiB << 20, Progress: func(done, total int64) {
			pct := 100 * done / max(total, 1)
			board.Set(status.StatePreparing, fmt.Sprintf("filling the root disk from its image: %d%%", pct))
			log.Info("filling the root disk from its image", zap.Int64("doneBytes", done), zap.Int64("totalBytes", total), zap.Int64("percent", pct))
		}}
		res, err := volumedisk.Fill(ctx, cfg.RootDisk, v.Path, o)
		if err != nil {
			return hypervisor.Disk{}, fmt.Errorf("--root-volume: filling the claim from the root-disk image: %w", err)
		}
		fields := []zap.Field{zap.String("disk", disk), zap.Bool("filledNow", res.Filled)}
		if res.Filled {
			fields = append(fields, zap.Int64("resumedAt", res.Resumed), zap.Int64("writtenBytes", res.Written))
		}
		if m := res.Marker; m != nil {
			fields = append(fields, zap.String("image", m.Image), zap.Time("filled", m.Finished), zap.Int64("sizeBytes", m.SizeBytes))
		}
		log.Info("root disk on a claim", fields...)
	}
	// Always raw: the guest writes this disk, so its first bytes are the guest's to choose, and
	// probing them for a format would let a guest make itself a qcow2 with a backing file.
	return hypervisor.Disk{Path: disk, Format: diskimage.FormatRaw, Direct: DirectIn(v.Path)}, nil
}

// Disks readies the data disks, in order, and returns a cleanup that removes what holds
// copies of ConfigMap and Secret data.
func Disks(cfg runnerconfig.Config, log *zap.Logger) ([]hypervisor.Disk, func(), error) {
	var drives []hypervisor.Disk
	var made []string
	cleanup := func() {
		for _, p := range made {
			_ = os.Remove(p)
		}
	}
	for _, d := range cfg.Disks {
		drive, err := prepareDisk(cfg, d, log)
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("--disk %s: %w", d.Name, err)
		}
		if d.Kind == runnerconfig.DiskFiles {
			made = append(made, drive.Path)
		}
		drives = append(drives, drive)
	}
	return drives, cleanup, nil
}

func prepareDisk(cfg runnerconfig.Config, d runnerconfig.Disk, log *zap.Logger) (hypervisor.Disk, error) {
	drive := hypervisor.Disk{Serial: d.Name, Format: diskimage.FormatRaw, ReadOnly: d.ReadOnly, Hotplug: d.Hotplug, Slot: d.Slot}
	switch d.Kind {
	case runnerconfig.DiskBlock:
		if err := isBlockDevice(d.Path); err != nil {
			return drive, err
		}
		drive.Path, drive.Block, drive.Direct = d.Path, true, true
		log.Info("disk", zap.String("name", d.Name), zap.String("kind", d.Kind), zap.String("device", d.Path), zap.Bool("readOnly", d.ReadOnly))
	case runnerconfig.DiskFile:
		drive.Path, drive.Direct = filepath.Join(d.Path, runnerconfig.DiskFileName), DirectIn(d.Path)
		if d.ReadOnly {
			// A read-only claim is used as it is: the runner writes nothing to it.
			if _, err := os.Stat(drive.Path); err != nil {
				return drive, fmt.Errorf("the read-only claim holds no %s: fill it once from a VM that writes it, or put a raw disk there", runnerconfig.DiskFileName)
			}
			break
		}
		size := d.SizeMiB << 20
		if size == 0 {
			s, err := volumedisk.VolumeSize(d.Path)
			if err != nil {
				return drive, err
			}
			size = s
		}
		created := true
		var err error
		if receives(cfg, d) {
			_, err = volumedisk.Receive(d.Path, size, cfg.Name)
		} else if err = volumedisk.CheckComplete(d.Path); err == nil {
			created, err = volumedisk.Ensure(drive.Path, size)
		}
		if err != nil {
			return drive, err
		}
		fi, _ := os.Stat(drive.Path)
		log.Info("disk", zap.String("name", d.Name), zap.String("kind", d.Kind), zap.String("file", drive.Path),
			zap.Bool("created", created), zap.Int64("sizeBytes", fi.Size()), zap.Bool("direct", drive.Direct))
	case runnerconfig.DiskEmpty:
		// Blank at every start, whatever an earlier runner in this pod left.
		drive.Path, drive.Direct = filepath.Join(d.Path, runnerconfig.DiskFileName), DirectIn(d.Path)
		if err := os.Remove(drive.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return drive, err
		}
		if _, err := volumedisk.Ensure(drive.Path, d.SizeMiB<<20); err != nil {
			return drive, err
		}
		log.Info("disk", zap.String("name", d.Name), zap.String("kind", d.Kind), zap.Int64("sizeMiB", d.SizeMiB))
	case runnerconfig.DiskFiles:
		files, err := readFiles(d.Path)
		if err != nil {
			return drive, err
		}
		drive.Path, drive.Direct = filepath.Join(cfg.StateDir, "disk-"+d.Name+".iso"), DirectIn(cfg.StateDir)
		if err := isodisk.Write(drive.Path, d.Name, files); err != nil {
			return drive, err
		}
		names := make([]string, 0, len(files))
		for n := range files {
			names = append(names, n)
		}
		log.Info("disk", zap.String("name", d.Name), zap.String("kind", d.Kind), zap.Strings("files", names))
	case runnerconfig.DiskImage:
		// The image is the VM owner's: a qcow2 header must not make QEMU open a host path.
		if err := diskfile.CheckImage(d.Path); err != nil {
			return drive, err
		}
		format, size, err := diskimage.Inspect(d.Path)
		if err != nil {
			return drive, err
		}
		// Read-only and from an image, not the guest: its format may be read from its header.
		drive.Path, drive.Format, drive.Direct = d.Path, format, DirectIn(filepath.Dir(d.Path))
		log.Info("disk", zap.String("name", d.Name), zap.String("kind", d.Kind), zap.String("format", format), zap.Int64("sizeBytes", size))
	}
	return drive, nil
}

// readFiles reads the keys of a mounted ConfigMap or Secret: the kubelet makes each key a
// symlink into a hidden ..data folder, which is skipped, as are folders.
func readFiles(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		if files[e.Name()], err = os.ReadFile(p); err != nil {
			return nil, err
		}
	}
	return files, nil
}

func isBlockDevice(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeDevice == 0 || fi.Mode()&fs.ModeCharDevice != 0 {
		return fmt.Errorf("%s is not a block device (a Block claim's device, mapped by the kubelet)", path)
	}
	return nil
}
