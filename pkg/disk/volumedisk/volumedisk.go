// Package volumedisk keeps disks on volumes that outlive the pod: a data disk file made once, at
// a size, on a Filesystem claim, and a root disk filled once from an image. Both are written so
// that a crash at any point leaves either no disk or a complete one, and neither ever overwrites
// a disk that is there: the guest's data is the one thing a runner must never lose.
package volumedisk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/pkg/disk/diskimage"
	"github.com/virtpod/virtpod/pkg/disk/sparsecopy"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// Names on a volume beside the disk (runnerconfig.DiskFileName).
const (
	partialName  = runnerconfig.DiskFileName + ".partial"  // a disk being made
	progressName = runnerconfig.DiskFileName + ".progress" // how far a fill got, for resuming
	markerName   = runnerconfig.PopulatedMarker
)

// Ensure makes path a sparse raw disk of size bytes unless a file is already there, which is
// kept as it is, whatever its size: a disk on a claim is made once and never again. created says
// which. The disk appears under its name only complete and synced.
func Ensure(path string, size int64) (created bool, err error) {
	if _, err := os.Lstat(path); err == nil {
		return false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if size <= 0 {
		return false, fmt.Errorf("%s: size %d: must be positive", path, size)
	}
	tmp := path + ".new"
	_ = os.Remove(tmp) // left by a runner that died making it
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp)
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", tmp, err)
	}
	// link, not rename: it fails if a disk appeared meanwhile, rename would replace it.
	if err := os.Link(tmp, path); err != nil {
		return false, err
	}
	return true, syncDir(filepath.Dir(path))
}

// VolumeSize is the size of the file system holding dir, rounded down to a MiB: the size of a
// disk on a claim whose capacity the runner was not told.
func VolumeSize(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Blocks) * st.Bsize >> 20 << 20, nil
}

// Marker is what the marker file records of a fill.
type Marker struct {
	Image        string    `json:"image"`
	ImageFormat  string    `json:"imageFormat"`
	SizeBytes    int64     `json:"sizeBytes"`
	WrittenBytes int64     `json:"writtenBytes"`
	Finished     time.Time `json:"finished"`
	// Migrated: the disk came whole from a live migration's source (whose claim was filled
	// from Image), not from Image here.
	Migrated bool `json:"migrated,omitempty"`
}

// FillOptions tune Fill.
type FillOptions struct {
	QEMUImg   string // converts a qcow2 image; a raw one is copied in Go
	SizeBytes int64  // the disk's size; 0 or less than the image's keeps the image's
	// Progress is called as the copy goes: bytes of the image done, of total.
	Progress func(done, total int64)
	// ChunkBytes is the unit of a raw copy (default 4 MiB); SyncEvery how many bytes go by
	// between syncs, each of which records how far the copy got (default 64 MiB).
	ChunkBytes, SyncEvery int64
}

// FillResult says what Fill did.
type FillResult struct {
	Path    string
	Filled  bool  // the image was copied now; false: the disk was there
	Resumed int64 // a raw copy resumed at this offset (0: from the start)
	Written int64 // bytes written: zero runs are left as holes
	Marker  *Marker
}

// Fill makes dir's disk from image, once. A disk already in dir is never touched; a volume whose
// marker says it was filled but whose disk is gone is refused rather than filled again, since
// someone removed the guest's data and a fresh copy would hide it. The copy goes to a partial
// file that becomes the disk only when complete and synced; a raw copy interrupted (the pod
// deleted, the node lost) resumes where its last sync left it, a qcow2 conversion starts again.
func Fill(ctx context.Context, image, dir string, o FillOptions) (FillResult, error) {
	disk := filepath.Join(dir, runnerconfig.DiskFileName)
	res := FillResult{Path: disk}
	if err := CheckComplete(dir); err != nil {
		return res, err
	}
	if _, err := os.Lstat(disk); err == nil {
		res.Marker, _ = ReadMarker(dir)
		return res, nil
	}
	partial := filepath.Join(dir, partialName)
	if _, err := os.Lstat(filepath.Join(dir, markerName)); err == nil {
		if _, err := os.Lstat(partial); err == nil {
			// The last fill wrote its marker and died before the rename: the copy is complete.
			if err := os.Rename(partial, disk); err != nil {
				return res, err
			}
			res.Marker, _ = ReadMarker(dir)
			return res, syncDir(dir)
		}
		return res, fmt.Errorf("%s says this volume was filled from an image, but %s is gone: refusing to fill it again over whatever was lost; restore the disk, or remove %s to start afresh",
			markerName, runnerconfig.DiskFileName, markerName)
	}
	format, imageSize, err := diskimage.Inspect(image)
	if err != nil {
		return res, fmt.Errorf("root-disk image: %w", err)
	}
	size := filledSize(imageSize, o.SizeBytes)
	switch format {
	case diskimage.FormatRaw:
		res.Resumed, res.Written, err = copyRaw(ctx, image, partial, filepath.Join(dir, progressName), imageSize, o)
	default:
		res.Written, err = convert(ctx, o.QEMUImg, image, partial)
	}
	if err != nil {
		return res, err
	}
	f, err := os.OpenFile(partial, os.O_RDWR, 0)
	if err != nil {
		return res, err
	}
	err = f.Truncate(size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return res, err
	}
	m := Marker{Image: image, ImageFormat: format, SizeBytes: size, WrittenBytes: res.Written, Finished: time.Now().UTC()}
	// The marker first: a disk never appears without it, so a later runner always knows it was
	// filled. A marker without the disk is refused above, unless the partial file is there: then
	// this fill died between the two steps, and the rename is all that is left to do.
	if err := writeFileSync(filepath.Join(dir, markerName), m); err != nil {
		return res, err
	}
	if err := os.Rename(partial, disk); err != nil {
		return res, err
	}
	_ = os.Remove(filepath.Join(dir, progressName))
	res.Filled, res.Marker = true, &m
	return res, syncDir(dir)
}

// filledSize is the size of a disk filled from an image of imageSize bytes when sizeBytes was
// asked for: the larger.
func filledSize(imageSize, sizeBytes int64) int64 { return max(imageSize, sizeBytes) }

// FilledSize is the size Fill gives a disk filled from image with FillOptions.SizeBytes
// sizeBytes: what a migration target's empty root disk must measure to take the source's.
func FilledSize(image string, sizeBytes int64) (int64, error) {
	_, imageSize, err := diskimage.Inspect(image)
	if err != nil {
		return 0, fmt.Errorf("root-disk image: %w", err)
	}
	return filledSize(imageSize, sizeBytes), nil
}

// ReadMarker reads dir's marker, if any.
func ReadMarker(dir string) (*Marker, error) {
	b, err := os.ReadFile(filepath.Join(dir, markerName))
	if err != nil {
		return nil, err
	}
	var m Marker
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", markerName, err)
	}
	return &m, nil
}

// copyRaw copies a raw image into partial chunk by chunk, leaving holes for zero chunks (which
// are punched, not skipped, so a resumed copy never keeps what a dead one half-wrote there), and
// records the offset synced so far in progress.
func copyRaw(ctx context.Context, image, partial, progress string, size int64, o FillOptions) (resumed, written int64, err error) {
	chunk, every := o.ChunkBytes, o.SyncEvery
	if chunk <= 0 {
		chunk = 4 << 20
	}
	if every <= 0 {
		every = 64 << 20
	}
	in, err := os.Open(image)
	if err != nil {
		return 0, 0, err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return 0, 0, err
	}
	// A resumed copy must continue the same image: the offset counts only for one of this size
	// and modification time.
	key := fmt.Sprintf("%d %d", st.Size(), st.ModTime().UnixNano())
	if _, err := os.Stat(partial); err == nil {
		resumed = readProgress(progress, key)
	}
	out, err := os.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return 0, 0, err
	}
	defer out.Close()
	if err := out.Truncate(size); err != nil {
		return 0, 0, err
	}
	buf := make([]byte, chunk)
	sinceSync := int64(0)
	for off := resumed; off < size; off += chunk {
		if err := ctx.Err(); err != nil {
			return resumed, written, err
		}
		n := int(min(chunk, size-off))
		if _, err := in.ReadAt(buf[:n], off); err != nil && !errors.Is(err, io.EOF) {
			return resumed, written, err
		}
		w, err := sparsecopy.WriteAt(out, buf[:n], off, true)
		written += w
		if err != nil {
			return resumed, written, err
		}
		if sinceSync += int64(n); sinceSync >= every || off+int64(n) >= size {
			if err := out.Sync(); err != nil {
				return resumed, written, err
			}
			if err := os.WriteFile(progress, []byte(key+" "+strconv.FormatInt(off+int64(n), 10)), 0o600); err != nil {
				return resumed, written, err
			}
			sinceSync = 0
			if o.Progress != nil {
				o.Progress(off+int64(n), size)
			}
		}
	}
	return resumed, written, out.Sync()
}

// readProgress is the offset a previous copy of the image key names synced; anything else
// starts again at 0.
func readProgress(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(string(b)), key+" ")
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// convert writes a qcow2 image out as a sparse raw disk with qemu-img (which skips zero runs).
func convert(ctx context.Context, qemuImg, image, partial string) (int64, error) {
	_ = os.Remove(partial) // a conversion does not resume
	out, err := exec.CommandContext(ctx, qemuImg, "convert", "-f", diskimage.FormatQCOW2, "-O", diskimage.FormatRaw, "-S", "4k", "--", image, partial).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("qemu-img convert %s: %v: %s", image, err, strings.TrimSpace(string(out)))
	}
	var st unix.Stat_t
	if err := unix.Stat(partial, &st); err != nil {
		return 0, err
	}
	return st.Blocks * 512, nil
}

func writeFileSync(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
