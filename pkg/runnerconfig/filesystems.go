package runnerconfig

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strings"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Filesystem is a directory of the pod shared into the guest through virtio-fs, rendered as
// --filesystem: a virtiofsd the runner starts serves it on a socket QEMU connects to, and the
// guest mounts it by Tag.
type Filesystem struct {
	Tag      string // the virtio-fs tag: a DNS label of at most 36 characters
	Path     string // the directory in the pod
	ReadOnly bool
}

var fsTagRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,34}[a-z0-9])?$`)

// String renders the filesystem as the value of --filesystem: tag=…,path=…[,readonly].
func (f Filesystem) String() string {
	s := "tag=" + f.Tag + ",path=" + f.Path
	if f.ReadOnly {
		s += ",readonly"
	}
	return s
}

// ParseFilesystem reads what String writes.
func ParseFilesystem(s string) (Filesystem, error) {
	var f Filesystem
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		k, v, hasValue := strings.Cut(kv, "=")
		if seen[k] {
			return Filesystem{}, fmt.Errorf("filesystem %q: %s given twice", s, k)
		}
		seen[k] = true
		switch {
		case k == "tag" && hasValue:
			f.Tag = v
		case k == "path" && hasValue:
			f.Path = v
		case k == "readonly" && !hasValue:
			f.ReadOnly = true
		default:
			return Filesystem{}, fmt.Errorf("filesystem %q: %q is not tag=, path= or readonly", s, kv)
		}
	}
	return f, nil
}

// validateFilesystems checks --filesystem: tags unique and short enough for the device, plain
// absolute paths, at most vmv1.MaxFilesystems, and only for provider qemu.
func (c *Config) validateFilesystems() []error {
	if len(c.Filesystems) == 0 {
		return nil
	}
	var errs []error
	if c.Provider != ProviderQEMU {
		errs = append(errs, errors.New("--filesystem: only for provider qemu (virtpod runs no virtiofsd for cloud-hypervisor)"))
	}
	if len(c.Filesystems) > vmv1.MaxFilesystems {
		errs = append(errs, fmt.Errorf("--filesystem: %d given, at most %d", len(c.Filesystems), vmv1.MaxFilesystems))
	}
	if c.SuspendTo != "" || c.ResumeFrom != "" {
		errs = append(errs, errors.New("--filesystem: not with --suspend-to or --resume-from (QEMU cannot save a guest whose files a virtiofsd holds open)"))
	}
	tags := map[string]bool{}
	for _, f := range c.Filesystems {
		if !fsTagRe.MatchString(f.Tag) {
			errs = append(errs, fmt.Errorf("--filesystem: tag %q must be a DNS label of at most %d characters", f.Tag, vmv1.MaxFilesystemTag))
		}
		if tags[f.Tag] {
			errs = append(errs, fmt.Errorf("--filesystem: tag %q given twice; each filesystem needs its own tag", f.Tag))
		}
		tags[f.Tag] = true
		if !diskPathRe.MatchString(f.Path) {
			errs = append(errs, fmt.Errorf("--filesystem %s: path %q must be an absolute path of letters, digits, '-', '_', '.' and '/'", f.Tag, f.Path))
		}
	}
	return errs
}

func (c Config) filesystemArgs() []string {
	var args []string
	for _, f := range c.Filesystems {
		args = append(args, "--filesystem="+f.String())
	}
	return args
}

// fsList collects repeated --filesystem flags.
type fsList struct{ fs *[]Filesystem }

func (l fsList) String() string {
	if l.fs == nil {
		return ""
	}
	s := make([]string, len(*l.fs))
	for i, f := range *l.fs {
		s[i] = f.String()
	}
	return strings.Join(s, " ")
}

func (l fsList) Set(v string) error {
	f, err := ParseFilesystem(v)
	if err != nil {
		return err
	}
	*l.fs = append(*l.fs, f)
	return nil
}

func (c *Config) bindFilesystems(fs *flag.FlagSet) {
	fs.Var(fsList{&c.Filesystems}, "filesystem", "a directory shared into the guest through virtio-fs (provider qemu; needs virtiofsd): tag=TAG,path=DIR[,readonly], repeatable; the guest mounts it by TAG")
}
