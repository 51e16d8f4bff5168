// Package rootdisk makes a guest's root disk from a root filesystem: a directory, or a tarball
// (`docker export`, a container image's flattened filesystem), becomes a raw disk image holding
// one ext4 file system, with no partition table (the guest boots with root=/dev/vda).
//
// The file system is made by mkfs.ext4 -d from e2fsprogs, not a Go library. The one
// maintained Go library that writes ext4, github.com/diskfs/go-diskfs (v1.9.4), cannot make hard
// links or device nodes (Link and Mknod return ErrNotImplemented), and sets a symlink's owner on
// its target; root filesystems have all three. mkfs.ext4 -d needs neither root nor a loop device.
// debugfs (same package) then applies what an unprivileged extraction cannot, and e2fsck checks
// the result.
package rootdisk

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Sector is the unit a raw disk's size must be a multiple of.
const Sector = 512

// FromDir writes to img a raw disk of size bytes holding an ext4 file system with the tree at
// dir, which keeps its files' owners, modes, times, hard links, devices and xattrs.
func FromDir(dir, img string, size int64) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return build(dir, img, size, nil, "")
}

// FromTar extracts the tarball file (plain or gzip) under work, which must exist, and writes the
// disk as FromDir does, with every entry's owner, mode, device numbers and xattrs as the tarball
// records them, whoever runs it. Entries that leave the root, through ".." or through a symlink,
// are refused.
func FromTar(file, work, img string, size int64) error {
	if err := checkSize(size); err != nil {
		return err
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	root, values := filepath.Join(work, "rootfs"), filepath.Join(work, "xattrs")
	for _, d := range []string{root, values} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	e := newExtractor(root, values)
	if err := e.extract(f); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	script := filepath.Join(work, "debugfs.cmds")
	if err := os.WriteFile(script, []byte(strings.Join(e.cmds, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	if len(e.cmds) == 0 {
		script = ""
	}
	return build(root, img, size, e, script)
}

func checkSize(size int64) error {
	if size <= 0 || size%Sector != 0 {
		return fmt.Errorf("disk size %d is not a positive number of whole %d-byte sectors", size, Sector)
	}
	return nil
}

// build makes the file system from root, applies the debugfs script if any and checks the result.
func build(root, img string, size int64, counted *extractor, script string) error {
	if err := checkSize(size); err != nil {
		return err
	}
	mkfs, debugfs, fsck, err := tools()
	if err != nil {
		return err
	}
	// A sparse file: mkfs writes only metadata, so the disk takes the space of its contents.
	f, err := os.OpenFile(img, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if out, err := run(mkfs, "-q", "-F", "-t", "ext4", "-d", root, img); err != nil {
		held, entries := contentSize(root, counted)
		return fmt.Errorf("mkfs.ext4 -d %s %s (%s): %w\n%s\nthe root filesystem holds %s in %d entries: if the disk is too small, raise --disk-size",
			root, img, mib(size), err, out, mib(held), entries)
	}
	if script != "" {
		if err := runDebugfs(debugfs, script, img); err != nil {
			return err
		}
	}
	if out, err := run(fsck, "-f", "-n", img); err != nil {
		return fmt.Errorf("e2fsck -fn %s: the new file system is inconsistent: %w\n%s", img, err, out)
	}
	return nil
}

// runDebugfs applies a command file. debugfs exits 0 even when a command fails, and reports
// failures on stderr after its version banner, so any other stderr line is an error.
func runDebugfs(debugfs, script, img string) error {
	cmd := exec.Command(debugfs, "-w", "-f", script, img)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("debugfs -w -f %s %s: %w\n%s", script, img, err, stderr.String())
	}
	var problems []string
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if line != "" && !strings.HasPrefix(line, "debugfs ") {
			problems = append(problems, line)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("debugfs -w -f %s %s, setting owners, modes, devices and xattrs from the tarball:\n%s",
			script, img, strings.Join(problems, "\n"))
	}
	return nil
}

// tools finds e2fsprogs' programs, also in the sbin directories a non-root PATH lacks.
func tools() (mkfs, debugfs, fsck string, err error) {
	find := func(name string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, dir := range []string{"/usr/sbin", "/sbin"} {
			if p := filepath.Join(dir, name); isExecutable(p) {
				return p
			}
		}
		return ""
	}
	mkfs, debugfs, fsck = find("mkfs.ext4"), find("debugfs"), find("e2fsck")
	if mkfs == "" || debugfs == "" || fsck == "" {
		return "", "", "", errors.New("mkfs.ext4, debugfs and e2fsck are needed to make a root disk: install e2fsprogs (apt-get install e2fsprogs)")
	}
	return mkfs, debugfs, fsck, nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// contentSize is what the root filesystem holds: counted during extraction, else walked.
func contentSize(root string, counted *extractor) (int64, int) {
	if counted != nil {
		return counted.Bytes, counted.Files
	}
	var total int64
	var entries int
	_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		entries++
		if fi, err := d.Info(); err == nil && fi.Mode().IsRegular() {
			total += fi.Size()
		}
		return nil
	})
	return total, entries
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
