// Package cloudinit writes a cloud-init NoCloud seed image: an ISO 9660 file system with Rock
// Ridge names and the volume label cidata, holding user-data, meta-data and, when given,
// network-config. cloud-init finds such a disk by its label and reads the files from it. The
// image is made by pkg/disk/isodisk, in Go.
package cloudinit

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/virtpod/virtpod/pkg/disk/isodisk"
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

// Write writes the seed image to path, replacing an older one only once the new one is complete
// (pkg/disk/isodisk: scratch files stay beside path, never in /tmp, and are removed).
func Write(path string, s Seed) error {
	meta, err := s.MetaData()
	if err != nil {
		return err
	}
	files := map[string][]byte{UserDataFile: s.UserData, MetaDataFile: meta}
	if s.NetworkConfig != nil {
		files[NetworkConfigFile] = s.NetworkConfig
	}
	if err := isodisk.Write(path, Label, files); err != nil {
		return fmt.Errorf("cloud-init seed: %w", err)
	}
	return nil
}
