// Package diskcopy is the program of a VirtualMachineSnapshot's copier pod, a short-lived pod of
// the runner image (Pod Security restricted: no root, no capabilities) that mounts the snapshot's
// claims and fills them with a VM's disks in one of two ways:
//
//   - Target (`virtpod-runner disk-target`): each of the snapshot's disk files is served as an NBD
//     export on a unix socket in the pod's control directory, which the node agent relays to the
//     running VM's QEMU; that QEMU pushes a point-in-time backup of its drive into it. qemu-nbd
//     serves one client and exits when it disconnects; then the file is synced and marked.
//   - Copy (`virtpod-runner disk-copy`): files are copied directly, sparse: a stopped VM's disks
//     into a snapshot's claims, or a snapshot's disks into a restored VM's new claims.
//
// Either way a completed disk has a marker, MarkerName, next to it (in its claim's top
// directory); a disk without one is an attempt that did not finish. A copier pod is never
// restarted: a file already where it would write is an earlier attempt's, and is refused
// (ExitRefused) rather than reused, since the controller makes a new snapshot instead.
package diskcopy

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Names and paths the copier pod and its readers agree on.
const (
	// MarkerName is the marker of a completed disk, in the directory of its file.
	MarkerName = ".virtpod-snapshot"
	// ReadyName is the file in the control directory that says every NBD socket is listening:
	// the node agent waits for it before it relays the VM's QEMU to the sockets.
	ReadyName = "disk-target.ready"
	// QEMUNBDName is qemu-nbd's program name; QEMUNBD is where Debian's qemu-utils (and so the
	// runner image) has it, next to qemu-img.
	QEMUNBDName = "qemu-nbd"
	QEMUNBD     = "/usr/bin/" + QEMUNBDName
	// EnvQEMUNBD moves qemu-nbd without changing a pod's flags (tests, other images).
	EnvQEMUNBD = "VIRTPOD_QEMU_NBD_BINARY"
	// maxSocketPath is the longest path a unix socket address holds (sun_path less its NUL).
	maxSocketPath = 107
	// sectorSize: a target's size is what QEMU's drive has, always whole sectors.
	sectorSize = 512
)

// Exit codes of disk-target and disk-copy.
const (
	ExitOK        = 0
	ExitFailed    = 1   // a copy or a qemu-nbd failed: nothing was marked complete
	ExitRefused   = 2   // the request was refused before anything was written (bad flags, leftovers)
	ExitSignalled = 143 // stopped by SIGTERM or SIGINT: nothing was marked complete
)

// SocketPath is where the NBD export of drive is served in controlDir.
func SocketPath(controlDir, drive string) string {
	return filepath.Join(controlDir, "nbd-"+drive+".sock")
}

// pidPath is where qemu-nbd serving drive writes its pid, once it listens and has the file open.
func pidPath(controlDir, drive string) string {
	return filepath.Join(controlDir, ".nbd-"+drive+".pid")
}

// MarkerPath is the marker of the disk file file.
func MarkerPath(file string) string { return filepath.Join(filepath.Dir(file), MarkerName) }

// refusal is an error in what was asked: nothing has been written when it is returned.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

func refuse(format string, args ...any) error { return &refusal{fmt.Sprintf(format, args...)} }

// IsRefused says whether err refuses the request (ExitRefused) rather than reports a failure.
func IsRefused(err error) bool {
	var r *refusal
	return errors.As(err, &r)
}

// ExitCode is the exit code of disk-target or disk-copy that ended with err.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case IsRefused(err):
		return ExitRefused
	case errors.Is(err, context.Canceled):
		return ExitSignalled
	}
	return ExitFailed
}

// TargetSpec is one --target: a disk file to create and serve as the NBD export of a drive.
type TargetSpec struct {
	// Drive is the VM's drive: "root" or "disk-<name>"; it names the export and its socket.
	Drive string
	// File is the disk file to create (absolute); it must not exist.
	File string
	// Size is the drive's size in bytes.
	Size int64
	// Base, when set, is an earlier snapshot's disk of the same size, copied into File before it
	// is served (an incremental backup then writes only what changed since).
	Base string
}

// CopySpec is one --copy: a disk file copied into a new one.
type CopySpec struct {
	From, To string
	// Size, when above From's size, is To's size (the rest a hole); 0 keeps From's size.
	Size int64
	// Drive, optional, is recorded in the marker.
	Drive string
}

const (
	targetSyntax = "drive=<root|disk-NAME>,file=<absolute path>[,size=<bytes>][,base=<absolute path>]"
	copySyntax   = "from=<absolute path>,to=<absolute path>[,size=<bytes>][,drive=<root|disk-NAME>]"
)

var driveRE = regexp.MustCompile(`^[a-z0-9-]{1,40}$`)

// ParseTarget reads one --target value.
func ParseTarget(s string) (TargetSpec, error) {
	const flag = "--target"
	kv, err := parseOptions(flag, targetSyntax, s, []string{"drive", "file", "size", "base"})
	if err != nil {
		return TargetSpec{}, err
	}
	for _, k := range []string{"drive", "file"} {
		if _, ok := kv[k]; !ok {
			return TargetSpec{}, refuse("%s %q: %s= is missing: want %s", flag, s, k, targetSyntax)
		}
	}
	t := TargetSpec{Drive: kv["drive"], File: kv["file"], Base: kv["base"]}
	if err := checkDrive(flag, s, t.Drive); err != nil {
		return TargetSpec{}, err
	}
	if err := checkPath(flag, s, "file", t.File); err != nil {
		return TargetSpec{}, err
	}
	if _, ok := kv["base"]; ok {
		if err := checkPath(flag, s, "base", t.Base); err != nil {
			return TargetSpec{}, err
		}
		if t.Base == t.File {
			return TargetSpec{}, refuse("%s %q: base and file are the same file: base is an earlier snapshot's disk, file the new one", flag, s)
		}
	}
	if _, ok := kv["size"]; !ok {
		return t, nil // Size 0: the node agent says it in SizesName
	}
	if t.Size, err = parseSize(flag, s, kv["size"]); err != nil {
		return TargetSpec{}, err
	}
	return t, checkSectors(flag+" "+strconv.Quote(s), t.Size)
}

// checkSectors refuses a target size that is not whole sectors: QEMU's drives always are.
func checkSectors(what string, size int64) error {
	if size%sectorSize != 0 {
		return refuse("%s: size %d is not a whole number of %d-byte sectors: give the drive's size as QEMU reports it", what, size, sectorSize)
	}
	return nil
}

// ParseCopy reads one --copy value.
func ParseCopy(s string) (CopySpec, error) {
	const flag = "--copy"
	kv, err := parseOptions(flag, copySyntax, s, []string{"from", "to", "size", "drive"})
	if err != nil {
		return CopySpec{}, err
	}
	for _, k := range []string{"from", "to"} {
		if _, ok := kv[k]; !ok {
			return CopySpec{}, refuse("%s %q: %s= is missing: want %s", flag, s, k, copySyntax)
		}
	}
	c := CopySpec{From: kv["from"], To: kv["to"], Drive: kv["drive"]}
	if err := checkPath(flag, s, "from", c.From); err != nil {
		return CopySpec{}, err
	}
	if err := checkPath(flag, s, "to", c.To); err != nil {
		return CopySpec{}, err
	}
	if c.From == c.To {
		return CopySpec{}, refuse("%s %q: from and to are the same file: to must be a new file", flag, s)
	}
	if _, ok := kv["drive"]; ok {
		if err := checkDrive(flag, s, c.Drive); err != nil {
			return CopySpec{}, err
		}
	}
	if v, ok := kv["size"]; ok {
		if c.Size, err = parseSize(flag, s, v); err != nil {
			return CopySpec{}, err
		}
	}
	return c, nil
}

// parseOptions splits s, key=value items separated by commas, into its known keys.
func parseOptions(flag, syntax, s string, known []string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, refuse("%s is empty: want %s", flag, syntax)
	}
	kv := map[string]string{}
	for _, item := range strings.Split(s, ",") {
		if item == "" {
			return nil, refuse("%s %q: an empty item (a stray comma): want %s", flag, s, syntax)
		}
		k, v, ok := strings.Cut(item, "=")
		switch {
		case !ok:
			return nil, refuse("%s %q: %q is not key=value: items are separated by commas, so no value may contain one (use a path without commas); want %s", flag, s, item, syntax)
		case !contains(known, k):
			return nil, refuse("%s %q: unknown key %q: want one of %s (%s)", flag, s, k, strings.Join(known, ", "), syntax)
		case v == "":
			return nil, refuse("%s %q: %s= is empty: want %s", flag, s, k, syntax)
		case strings.Contains(v, "="):
			return nil, refuse("%s %q: the value of %s contains '=': values may contain neither '=' nor ',' (use a path without them)", flag, s, k)
		case strings.IndexFunc(v, func(r rune) bool { return unicode.IsControl(r) || r == unicode.ReplacementChar }) >= 0:
			return nil, refuse("%s %q: the value of %s contains a control character or invalid UTF-8", flag, s, k)
		}
		if _, dup := kv[k]; dup {
			return nil, refuse("%s %q: %s is given twice: give it once", flag, s, k)
		}
		kv[k] = v
	}
	return kv, nil
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func checkDrive(flag, s, d string) error {
	if !driveRE.MatchString(d) || (d != "root" && (!strings.HasPrefix(d, "disk-") || d == "disk-")) {
		return refuse("%s %q: drive %q: want root or disk-<name> (the VM's drive id), of lower-case letters, digits and '-', at most 40 characters", flag, s, d)
	}
	return nil
}

func checkPath(flag, s, key, p string) error {
	if !filepath.IsAbs(p) {
		return refuse("%s %q: %s %q is not an absolute path: give it from / (where the claim is mounted in the pod)", flag, s, key, p)
	}
	if c := filepath.Clean(p); c != p {
		return refuse("%s %q: %s %q is not a clean path: write %s", flag, s, key, p, c)
	}
	if p == "/" || filepath.Base(p) == MarkerName {
		return refuse("%s %q: %s %q cannot be a disk file: name the disk file on the claim (e.g. disk.img)", flag, s, key, p)
	}
	return nil
}

func parseSize(flag, s, v string) (int64, error) {
	if strings.Trim(v, "0123456789") != "" {
		return 0, refuse("%s %q: size %q is not a number of bytes: write it in decimal digits, e.g. size=10737418240 for 10 GiB", flag, s, v)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, refuse("%s %q: size %q: too large", flag, s, v)
	}
	if n <= 0 {
		return 0, refuse("%s %q: size must be more than 0 bytes", flag, s)
	}
	return n, nil
}

// CheckTargets checks targets against each other and the control directory: what ParseTarget
// cannot see alone. It touches no file.
func CheckTargets(controlDir string, targets []TargetSpec) error {
	if controlDir == "" {
		return refuse("--control-dir is required: the directory the node agent reaches the NBD sockets in")
	}
	if !filepath.IsAbs(controlDir) || filepath.Clean(controlDir) != controlDir {
		return refuse("--control-dir %q: want a clean absolute path", controlDir)
	}
	if len(targets) == 0 {
		return refuse("no --target: give one per drive, --target %s", targetSyntax)
	}
	drives, files, dirs := map[string]bool{}, map[string]string{}, map[string]string{}
	for _, t := range targets {
		if drives[t.Drive] {
			return refuse("--target: drive %s is given twice: its socket %s can serve one file; give each drive once", t.Drive, SocketPath(controlDir, t.Drive))
		}
		drives[t.Drive] = true
		if d, ok := files[t.File]; ok {
			return refuse("--target: drives %s and %s both name file %s: give each drive a file of its own", d, t.Drive, t.File)
		}
		files[t.File] = t.Drive
		if d, ok := dirs[filepath.Dir(t.File)]; ok {
			return refuse("--target: drives %s and %s both have their file in %s, where one marker (%s) says one disk is complete: put each drive's file on a claim of its own", d, t.Drive, filepath.Dir(t.File), MarkerName)
		}
		dirs[filepath.Dir(t.File)] = t.Drive
		if sock := SocketPath(controlDir, t.Drive); len(sock) > maxSocketPath {
			return refuse("--control-dir %q is too long: the socket %s is %d bytes, and a unix socket path holds at most %d: use a shorter directory", controlDir, sock, len(sock), maxSocketPath)
		}
	}
	for _, t := range targets {
		if d, ok := files[t.Base]; ok {
			return refuse("--target: drive %s's base %s is drive %s's new file: a base is a completed earlier snapshot's disk", t.Drive, t.Base, d)
		}
	}
	return nil
}

// CheckCopies checks copies against each other: what ParseCopy cannot see alone.
func CheckCopies(copies []CopySpec) error {
	if len(copies) == 0 {
		return refuse("no --copy: give one per disk, --copy %s", copySyntax)
	}
	tos, dirs := map[string]bool{}, map[string]string{}
	for _, c := range copies {
		if tos[c.To] {
			return refuse("--copy: %s is the destination of two copies: give each copy a file of its own", c.To)
		}
		tos[c.To] = true
		if other, ok := dirs[filepath.Dir(c.To)]; ok {
			return refuse("--copy: %s and %s are in one directory, where one marker (%s) says one disk is complete: put each copy on a claim of its own", other, c.To, MarkerName)
		}
		dirs[filepath.Dir(c.To)] = c.To
	}
	for _, c := range copies {
		if tos[c.From] {
			return refuse("--copy: %s is both copied from and written to: copy from completed disks into new files", c.From)
		}
	}
	return nil
}
