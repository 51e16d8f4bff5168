package diskfile_test

import (
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/disk/cloudinit"
	"github.com/virtpod/virtpod/pkg/disk/diskfile"
	"github.com/virtpod/virtpod/tests/prereq"
)

func TestChoose(t *testing.T) {
	f := func(names ...string) []diskfile.Entry {
		var es []diskfile.Entry
		for _, n := range names {
			dir := strings.HasSuffix(n, "/")
			es = append(es, diskfile.Entry{Name: strings.TrimSuffix(n, "/"), Regular: !dir})
		}
		return es
	}
	for name, tc := range map[string]struct {
		entries []diskfile.Entry
		want    string   // the chosen name, or "" for an error
		errHas  []string // what the error must say
	}{
		"root.img":                      {f("root.img"), "root.img", nil},
		"root.img wins over others":     {f("a.qcow2", "root.img", "b.raw"), "root.img", nil},
		"one qcow2":                     {f("debian-12.qcow2"), "debian-12.qcow2", nil},
		"one img":                       {f("disk.img"), "disk.img", nil},
		"one raw":                       {f("disk.raw"), "disk.raw", nil},
		"upper-case extension":          {f("DISK.QCOW2"), "DISK.QCOW2", nil},
		"one disk beside other files":   {f("README", "disk.qcow2", "checksums/", "disk.qcow2.sha256"), "disk.qcow2", nil},
		"a directory named like a disk": {f("old.img/", "new.qcow2"), "new.qcow2", nil},
		"empty":                         {f(), "", []string{"/disk is empty", "/disk/root.img", "one .qcow2, .img or .raw file", "containerDisk"}},
		"two disks":                     {f("a.qcow2", "b.img"), "", []string{"2 disk files (a.qcow2, b.img)", "no root.img to choose", "keep one, or name the root disk root.img"}},
		"three disks and others":        {f("c.raw", "a.qcow2", "notes.txt", "b.img"), "", []string{"3 disk files (a.qcow2, b.img, c.raw)"}},
		"only other kinds":              {f("disk.vmdk", "notes.txt"), "", []string{"holds no disk file (found disk.vmdk, notes.txt)", "qemu-img convert -O qcow2", "containerDisk"}},
		"root.img is a directory":       {f("root.img/"), "", []string{"holds no disk file (found root.img (not a file))"}},
		"hidden and bare extension":     {f(".img", ".hidden.qcow2"), "", []string{"holds no disk file (found .hidden.qcow2, .img)"}},
		"many others, listed short":     {f("1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"), "", []string{"and 2 more"}},
	} {
		got, err := diskfile.Choose(tc.entries)
		if tc.want != "" {
			if err != nil || got != tc.want {
				t.Errorf("%s: Choose = %q, %v; want %q", name, got, err, tc.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: Choose = %q, want an error", name, got)
			continue
		}
		for _, s := range tc.errHas {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q does not say %q", name, err, s)
			}
		}
	}
}

// TestPick reads real directories: symlinks count as the files they point to, and a missing
// /disk is named.
func TestPick(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "real.bin"), make([]byte, 512))
	if err := os.Symlink("real.bin", filepath.Join(dir, "disk.qcow2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nonexistent", filepath.Join(dir, "dangling.img")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.raw"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := diskfile.Pick(dir); err != nil || got != filepath.Join(dir, "disk.qcow2") {
		t.Errorf("Pick = %q, %v; want the symlink disk.qcow2 (the dangling link and the directory are no disks)", got, err)
	}
	if _, err := diskfile.Pick(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "the VM image has no /disk") {
		t.Errorf("missing directory: %v", err)
	}
}

// TestFormat: qcow2 and raw pass; what qemu-img makes in other formats, compressed disks, an ISO
// and broken files are refused naming what they are.
func TestFormat(t *testing.T) {
	_, err := exec.LookPath("qemu-img")
	prereq.Need(t, err == nil, "needs qemu-img (qemu-utils): run tools/dev/ci/install-deps.sh")
	dir := t.TempDir()
	img := func(format string, opts ...string) string {
		p := filepath.Join(dir, "disk."+format+strings.Join(opts, ""))
		args := append([]string{"create", "-q", "-f", format}, opts...)
		if out, err := exec.Command("qemu-img", append(args, p, "16M")...).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img create -f %s: %v\n%s", format, err, out)
		}
		return p
	}
	raw := img("raw")
	qcow2 := img("qcow2")
	overlay := filepath.Join(dir, "overlay.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", qcow2, overlay).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(make([]byte, 1<<20))
	_ = zw.Close()
	gzFile := filepath.Join(dir, "disk.img.gz")
	write(t, gzFile, gz.Bytes())
	xz := filepath.Join(dir, "xz")
	write(t, xz, []byte("\xfd7zXZ\x00\x00\x04 rest of an xz stream"))
	iso := filepath.Join(dir, "cidata.iso")
	if err := cloudinit.Write(iso, cloudinit.Seed{InstanceID: "i-1", Hostname: "h", UserData: []byte("#cloud-config\n")}); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	write(t, empty, nil)
	odd := filepath.Join(dir, "odd")
	write(t, odd, make([]byte, 1000))

	for _, tc := range []struct {
		file, want string // want: the format, or what the error says
		ok         bool
	}{
		{raw, "raw", true},
		{qcow2, "qcow2", true},
		{img("qcow2", "-o", "compat=0.10"), "qcow2", true},
		{img("vmdk"), "is a VMDK image, not a raw or qcow2 disk image: convert it with qemu-img convert -O qcow2", false},
		{img("vmdk", "-o", "subformat=monolithicFlat"), "is a VMDK image", false},
		{img("vdi"), "is a VDI image (VirtualBox)", false},
		{img("vhdx"), "is a VHDX image", false},
		{img("vpc"), "is a VHD image", false},
		{img("qed"), "is a QED image", false},
		{img("qcow"), "is a qcow (version 1) image, not qcow2", false},
		{overlay, "is a qcow2 overlay on a backing file (" + qcow2 + ") the pod does not have: flatten it", false},
		{gzFile, "is gzip-compressed, not a raw or qcow2 disk image: decompress it first", false},
		{xz, "is xz-compressed", false},
		{iso, "is an ISO 9660 image", false},
		{empty, "is empty", false},
		{odd, "is 1000 bytes, not whole 512-byte sectors", false},
		{dir, "is not a regular file", false},
	} {
		got, err := diskfile.Format(tc.file)
		if tc.ok {
			if err != nil || got != tc.want {
				t.Errorf("%s: Format = %q, %v; want %s", tc.file, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.file) {
			t.Errorf("%s: Format = %q, %v; want an error naming the file and saying %q", tc.file, got, err, tc.want)
		}
	}
}

// TestResolve: a file is taken as it is; a directory is a VM image's /disk.
func TestResolve(t *testing.T) {
	dir := t.TempDir()
	disk := filepath.Join(dir, "debian-12.raw")
	write(t, disk, make([]byte, 4096))
	for _, p := range []string{disk, dir} {
		if file, format, err := diskfile.Resolve(p); err != nil || file != disk || format != diskfile.FormatRaw {
			t.Errorf("Resolve(%s) = %q, %q, %v", p, file, format, err)
		}
	}
	write(t, filepath.Join(dir, "second.img"), make([]byte, 4096))
	if _, _, err := diskfile.Resolve(dir); err == nil || !strings.Contains(err.Error(), "2 disk files (debian-12.raw, second.img)") {
		t.Errorf("two disks: %v", err)
	}
	if _, _, err := diskfile.Resolve(filepath.Join(dir, "nonexistent.img")); err == nil {
		t.Error("a missing file resolved")
	}
}

func write(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
