package diskcopy

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/disk/sparsecopy"
)

// PartialSuffix names a copy in progress: To+PartialSuffix, renamed to To once complete.
const PartialSuffix = ".partial"

// CopyOptions are Copy's settings.
type CopyOptions struct {
	// Log receives what Copy does, its progress among it; nil logs nothing.
	Log *zap.Logger
	// RequireMarker refuses a From without its marker (not a completed snapshot disk): what a
	// restore from a snapshot asks.
	RequireMarker bool
}

// Copy copies each From into a new file To, in order: sparse (From's holes and zero blocks stay
// holes) into To+PartialSuffix, synced, renamed to To, its directory synced, and then To's
// marker written. A larger Size extends To with a hole. It checks every copy before it writes
// anything and refuses (IsRefused) a From that is missing (or, with RequireMarker, has no
// marker), a To or To+PartialSuffix or marker already there, or a Size below From's. A copy that
// fails or is stopped (ctx) removes its partial file and writes no marker.
func Copy(ctx context.Context, copies []CopySpec, o CopyOptions) error {
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	if err := CheckCopies(copies); err != nil {
		return err
	}
	sizes := make([]int64, len(copies))
	for i, c := range copies {
		var err error
		if sizes[i], err = checkCopyFiles(c, o.RequireMarker); err != nil {
			return err
		}
	}
	for i, c := range copies {
		if err := copyOne(ctx, c, sizes[i], log); err != nil {
			return err
		}
	}
	return nil
}

// checkCopyFiles refuses a copy the files do not allow; it returns To's size.
func checkCopyFiles(c CopySpec, requireMarker bool) (int64, error) {
	fi, err := os.Stat(c.From)
	switch {
	case err != nil:
		return 0, refuse("--copy: from %s: %v: is its claim mounted there?", c.From, err)
	case !fi.Mode().IsRegular():
		return 0, refuse("--copy: from %s is not a regular file: name the disk file (e.g. disk.img)", c.From)
	}
	if requireMarker {
		m, err := ReadMarker(c.From)
		if err != nil {
			return 0, refuse("--copy: %s is not a completed snapshot disk: no readable %s next to it (%v)", c.From, MarkerName, err)
		}
		if m.Size != fi.Size() {
			return 0, refuse("--copy: %s is not a completed snapshot disk: its marker records %d bytes, the file has %d", c.From, m.Size, fi.Size())
		}
	}
	size := fi.Size()
	if c.Size != 0 {
		if c.Size < size {
			return 0, refuse("--copy: size %d is below %s's %d bytes: a copy cannot shrink a disk; give a size of at least %d, or none", c.Size, c.From, size, size)
		}
		size = c.Size
	}
	dir := filepath.Dir(c.To)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return 0, refuse("--copy: the directory of %s is not there (%v): is the claim mounted at %s?", c.To, errOr(err, "not a directory"), dir)
	}
	for _, p := range []string{c.To, c.To + PartialSuffix, MarkerPath(c.To)} {
		if exists(p) {
			return 0, refuse("--copy: %s exists already: %s", p, earlierAttempt)
		}
	}
	return size, nil
}

func copyOne(ctx context.Context, c CopySpec, size int64, log *zap.Logger) error {
	partial := c.To + PartialSuffix
	log.Info("copying "+c.From+" to "+c.To, zap.String("from", c.From), zap.String("to", c.To), zap.Int64("sizeBytes", size))
	fields := []zap.Field{}
	if c.Drive != "" {
		fields = append(fields, zap.String("drive", c.Drive))
	}
	if _, err := sparseCopy(ctx, c.From, partial, size, log.With(fields...)); err != nil {
		_ = os.Remove(partial)
		return err
	}
	if err := os.Rename(partial, c.To); err != nil {
		_ = os.Remove(partial)
		return err
	}
	if err := sparsecopy.SyncDir(filepath.Dir(c.To)); err != nil {
		return err
	}
	m := Marker{Drive: c.Drive, Size: size, From: c.From, CompletedAt: time.Now().UTC()}
	if err := writeMarker(c.To, m); err != nil {
		return err
	}
	log.Info("copy complete", zap.String("to", c.To), zap.String("marker", MarkerPath(c.To)))
	return nil
}
