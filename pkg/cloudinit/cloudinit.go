// Package cloudinit writes a cloud-init NoCloud seed image: an ISO 9660 file system with Rock
// Ridge names and the volume label cidata, holding user-data, meta-data and, when given,
// network-config. cloud-init finds such a disk by its label and reads the files from it. The
// image is made in Go (github.com/diskfs/go-diskfs), so the runner needs no genisoimage.
package cloudinit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

// Label is the volume label cloud-init's NoCloud source looks for.
const Label = "cidata"

// File names on the seed, as NoCloud defines them.
const (
	UserDataFile      = "user-data"
	MetaDataFile      = "meta-data"
	NetworkConfigFile = "network-config"
)

// Seed is what the guest is given.
type Seed struct {
	// InstanceID is meta-data's instance-id: cloud-init runs its once-per-instance steps again
	// only when it changes.
	InstanceID string
	// Hostname is meta-data's local-hostname.
	Hostname      string
	UserData      []byte
	NetworkConfig []byte // nil: no network-config file
}

var (
	instanceIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)
	hostnameRe   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?$`)
)

// MetaData renders meta-data. Both values are checked against plain character sets, so they
// are YAML scalars as they stand and cannot add keys.
func (s Seed) MetaData() ([]byte, error) {
	var errs []error
	if !instanceIDRe.MatchString(s.InstanceID) {
		errs = append(errs, fmt.Errorf("instance-id %q: want 1-253 letters, digits, '.', '_' or '-' (the VM's UID)", s.InstanceID))
	}
	if !hostnameRe.MatchString(s.Hostname) {
		errs = append(errs, fmt.Errorf("local-hostname %q: want a host name of 1-63 letters, digits and '-' (the VM's name)", s.Hostname))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "instance-id: %s\nlocal-hostname: %s\n", s.InstanceID, s.Hostname), nil
}

// Write writes the seed image to path, replacing an older one only once the new one is complete.
// Scratch files go in a private directory beside path: the data is secret, so it stays in the
// directory the caller chose (never /tmp), and is removed afterwards.
func Write(path string, s Seed) error {
	meta, err := s.MetaData()
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	work, err := os.MkdirTemp(dir, ".cidata-") // mode 0700
	if err != nil {
		return fmt.Errorf("cloud-init seed: %w", err)
	}
	defer os.RemoveAll(work)
	files := map[string][]byte{UserDataFile: s.UserData, MetaDataFile: meta}
	if s.NetworkConfig != nil {
		files[NetworkConfigFile] = s.NetworkConfig
	}
	tree := filepath.Join(work, "tree")
	if err := os.Mkdir(tree, 0o700); err != nil {
		return fmt.Errorf("cloud-init seed: %w", err)
	}
	for name, data := range files {
		// 0600: the guest sees Rock Ridge modes; user-data is for root (cloud-init) only.
		if err := os.WriteFile(filepath.Join(tree, name), data, 0o600); err != nil {
			return fmt.Errorf("cloud-init seed: %w", err)
		}
	}
	tmp := filepath.Join(work, "seed.iso")
	if err := writeISO(tmp, tree); err != nil {
		return fmt.Errorf("cloud-init seed %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("cloud-init seed: %w", err)
	}
	return nil
}

// writeISO makes an ISO 9660 image of the files in tree. go-diskfs builds the image from a
// workspace directory; tree is that directory, and Finalize removes it.
func writeISO(path, tree string) error {
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
	if err := fsys.Finalize(iso9660.FinalizeOptions{RockRidge: true, VolumeIdentifier: Label}); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}
