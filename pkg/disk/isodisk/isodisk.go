// Package isodisk writes small read-only disks: an ISO 9660 file system with Rock Ridge names
// and a volume label, holding a flat set of files. The cloud-init seed (label cidata) and
// ConfigMap and Secret disks (labelled with the disk's name) are such disks. The image is made
// in Go (github.com/diskfs/go-diskfs), so the runner needs no genisoimage.
package isodisk

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

// MaxLabel is the length of an ISO 9660 volume identifier.
const MaxLabel = 32

// nameRe is what a file on the disk may be called: a ConfigMap or Secret key's characters.
var nameRe = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

// Write writes the image to path, replacing an older one only once the new one is complete.
// Scratch files go in a private directory beside path: the data may be secret, so it stays in
// the directory the caller chose (never /tmp), and is removed afterwards. Files are mode 0600
// in the guest (Rock Ridge): the data is for root.
func Write(path, label string, files map[string][]byte) error {
	if label == "" || len(label) > MaxLabel {
		return fmt.Errorf("disk label %q: want 1-%d characters", label, MaxLabel)
	}
	for name := range files {
		if !nameRe.MatchString(name) || name == "." || name == ".." {
			return fmt.Errorf("file name %q: want letters, digits, '-', '_' and '.'", name)
		}
	}
	work, err := os.MkdirTemp(filepath.Dir(path), ".isodisk-") // mode 0700
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	tree := filepath.Join(work, "tree")
	if err := os.Mkdir(tree, 0o700); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(tree, name), data, 0o600); err != nil {
			return err
		}
	}
	tmp := filepath.Join(work, "disk.iso")
	if err := writeISO(tmp, label, tree); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// writeISO makes an ISO 9660 image of the files in tree. go-diskfs builds the image from a
// workspace directory; tree is that directory, and Finalize removes it.
func writeISO(path, label, tree string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	// Size 0: the image is as large as its contents; Finalize writes every block.
	fsys, err := iso9660.Create(file.New(f, false), 0, 0, 2048, tree)
	if err != nil {
		return err
	}
	if err := fsys.Finalize(iso9660.FinalizeOptions{RockRidge: true, VolumeIdentifier: label}); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}
