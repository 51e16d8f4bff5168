// Package diskfile finds a VM image's root disk and checks its format. A VM image holds its disk
// under /disk either as root.img (virtpod's layout) or as the one .qcow2, .img or .raw file there
// (KubeVirt's containerDisk layout, which many published images use). It is its own package, not
// part of pkg/image/vmimage, so the runner uses it without pulling in the image builder.
package diskfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// RootName is virtpod's own name for the root disk; it wins over any other file.
const RootName = "root.img"

// Extensions a containerDisk's disk file may have, lower case (matched case-insensitively).
var Extensions = []string{".qcow2", ".img", ".raw"}

// Formats the runner boots.
const (
	FormatQCOW2 = "qcow2"
	FormatRaw   = "raw"
)

// layoutHint is the fix every layout error ends with.
const layoutHint = "a VM image holds its disk as /disk/" + RootName + ", or as the one .qcow2, .img or .raw file in /disk (KubeVirt's containerDisk layout)"

// Entry is one entry of a /disk directory.
type Entry struct {
	Name string
	// Regular is true for a regular file, or a symlink to one.
	Regular bool
}

// IsCandidate reports whether a file of this name can be a containerDisk's disk.
func IsCandidate(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return slices.Contains(Extensions, ext) && len(name) > len(ext) && !strings.HasPrefix(name, ".")
}

// Choose picks the root disk among the entries of a VM image's /disk directory: root.img when it
// is there, else the one candidate file. It returns the chosen name; the error names what it
// found and the fix.
func Choose(entries []Entry) (string, error) {
	var candidates, others []string
	for _, e := range entries {
		switch {
		case e.Name == RootName && e.Regular:
			return RootName, nil
		case e.Regular && IsCandidate(e.Name):
			candidates = append(candidates, e.Name)
		case e.Regular:
			others = append(others, e.Name)
		default:
			others = append(others, e.Name+" (not a file)")
		}
	}
	slices.Sort(candidates)
	slices.Sort(others)
	switch {
	case len(candidates) == 1:
		return candidates[0], nil
	case len(candidates) > 1:
		return "", fmt.Errorf("the VM image's /disk holds %d disk files (%s) and no %s to choose: %s; keep one, or name the root disk %s",
			len(candidates), list(candidates), RootName, layoutHint, RootName)
	case len(others) == 0:
		return "", fmt.Errorf("the VM image's /disk is empty: %s", layoutHint)
	default:
		return "", fmt.Errorf("the VM image's /disk holds no disk file (found %s): %s; a disk in another format must be converted first (qemu-img convert -O qcow2)",
			list(others), layoutHint)
	}
}

// list names at most ten files, so a message stays within the termination message's limit.
func list(names []string) string {
	const most = 10
	if len(names) <= most {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:most], ", ") + fmt.Sprintf(" and %d more", len(names)-most)
}

// Pick reads dir, a VM image's /disk, and returns the path of its root disk (see Choose).
func Pick(dir string) (string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("the VM image has no /disk (%s does not exist): %s", dir, layoutHint)
		}
		return "", err
	}
	entries := make([]Entry, 0, len(des))
	for _, de := range des {
		regular := de.Type().IsRegular()
		if de.Type()&os.ModeSymlink != 0 {
			fi, err := os.Stat(filepath.Join(dir, de.Name()))
			regular = err == nil && fi.Mode().IsRegular()
		}
		entries = append(entries, Entry{Name: de.Name(), Regular: regular})
	}
	name, err := Choose(entries)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

// Resolve returns the root disk named by path — a disk file, or a VM image's /disk directory
// (see Pick) — and its format, qcow2 or raw.
func Resolve(path string) (file, format string, err error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("%s does not exist: %s", path, layoutHint)
	}
	if err != nil {
		return "", "", err
	}
	file = path
	if fi.IsDir() {
		if file, err = Pick(path); err != nil {
			return "", "", err
		}
	}
	format, err = Format(file)
	return file, format, err
}

// headSize covers every signature Format looks for (ISO 9660's is at 0x8001).
const headSize = 0x8006

// Format tells qcow2 (by its header) from raw, and refuses what the runner cannot boot: other
// disk formats, compressed files, ISO images, an empty file, a raw file that is not whole
// 512-byte sectors, and a qcow2 that is encrypted or needs a backing or external data file. The error names the
// file, what it is, and the fix.
func Format(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", file)
	}
	head := make([]byte, headSize)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read %s: %w", file, err)
	}
	head = head[:n]
	if n == 0 {
		return "", fmt.Errorf("%s is empty: a root disk is a raw or qcow2 disk image", file)
	}
	if bytes.HasPrefix(head, []byte("QFI\xfb")) {
		return FormatQCOW2, checkQCOW2(file, f)
	}
	if kind, fix := sniff(head); kind != "" {
		return "", fmt.Errorf("%s is %s, not a raw or qcow2 disk image: %s", file, kind, fix)
	}
	if fi.Size()%512 != 0 {
		return "", fmt.Errorf("%s is %d bytes, not whole 512-byte sectors, so not a raw disk image: pad it (truncate -s %%512) or convert it with qemu-img convert -O qcow2", file, fi.Size())
	}
	return FormatRaw, nil
}

const convert = "convert it with qemu-img convert -O qcow2"

// sniff names a known non-bootable format by its signature, with the fix.
func sniff(head []byte) (kind, fix string) {
	at := func(off int, sig string) bool {
		return len(head) >= off+len(sig) && string(head[off:off+len(sig)]) == sig
	}
	switch {
	case at(0, "KDMV"), at(0, "COWD"), at(0, "# Disk DescriptorFile"):
		return "a VMDK image", convert
	case len(head) >= 0x44 && binary.LittleEndian.Uint32(head[0x40:]) == 0xbeda107f:
		return "a VDI image (VirtualBox)", convert
	case at(0, "vhdxfile"):
		return "a VHDX image", convert
	case at(0, "conectix"):
		return "a VHD image", convert
	case at(0, "QED\x00"):
		return "a QED image", convert
	case at(0, "\x1f\x8b"):
		return "gzip-compressed", "decompress it first (the image's layer is compressed already)"
	case at(0, "\xfd7zXZ\x00"):
		return "xz-compressed", "decompress it first (the image's layer is compressed already)"
	case at(0, "\x28\xb5\x2f\xfd"):
		return "zstd-compressed", "decompress it first (the image's layer is compressed already)"
	case at(0, "BZh") && at(4, "1AY&SY"):
		return "bzip2-compressed", "decompress it first (the image's layer is compressed already)"
	case at(0, "PK\x03\x04"):
		return "a zip archive", "unpack the disk image from it"
	case at(0x8001, "CD001"):
		return "an ISO 9660 image (a CD/DVD)", "a root disk must be a disk image; install from the ISO into a disk, or use a cloud image"
	}
	return "", ""
}
