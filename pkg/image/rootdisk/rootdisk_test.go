package rootdisk

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func needE2fsprogs(t *testing.T) {
	t.Helper()
	if _, _, _, err := tools(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: missing prerequisites fail)", err)
		}
		t.Skip(err)
	}
}

// entry is one tarball member: a header and, for regular files, contents.
type entry struct {
	h    tar.Header
	body string
}

var mtime = time.Unix(1700000000, 0)

func dir(name string, mode int64, uid, gid int) entry {
	return entry{h: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, Uid: uid, Gid: gid, ModTime: mtime}}
}

func file(name string, mode int64, uid, gid int, body string) entry {
	return entry{h: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Uid: uid, Gid: gid, Size: int64(len(body)), ModTime: mtime}, body: body}
}

func link(typ byte, name, target string) entry {
	return entry{h: tar.Header{Typeflag: typ, Name: name, Linkname: target, Mode: 0o777, ModTime: mtime}}
}

func writeTar(t *testing.T, entries []entry, gz bool) string {
	t.Helper()
	var buf bytes.Buffer
	var w = &buf
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := e.h
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if gz {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(b)
		zw.Close()
		b = z.Bytes()
	}
	p := filepath.Join(t.TempDir(), "rootfs.tar")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A small root filesystem with what real ones have: owners other than root, setuid, a file
// capability, hard links, symlinks, device nodes, a FIFO, a sticky directory, a read-only
// directory with contents, and a name with a space.
func sampleRootfs() []entry {
	capability := "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
	ping := file("bin/ping", 0o4755, 0, 0, "ping")
	ping.h.PAXRecords = map[string]string{"SCHILY.xattr.security.capability": capability}
	console := entry{h: tar.Header{Typeflag: tar.TypeChar, Name: "dev/console", Mode: 0o620, Gid: 5, Devmajor: 5, Devminor: 1, ModTime: mtime}}
	null := entry{h: tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3, ModTime: mtime}}
	fifo := entry{h: tar.Header{Typeflag: tar.TypeFifo, Name: "run/initctl", Mode: 0o600, ModTime: mtime}}
	return []entry{
		dir("./", 0o755, 0, 0),
		dir("./etc/", 0o755, 0, 0),
		file("./etc/hostname", 0o644, 0, 0, "guest\n"),
		file("./etc/shadow", 0o640, 0, 42, "root:*:19000:0:99999:7:::\n"),
		dir("./bin/", 0o755, 0, 0),
		file("./bin/busybox", 0o755, 0, 0, "#!busybox\n"),
		link(tar.TypeSymlink, "./bin/sh", "busybox"),
		ping,
		dir("./usr/bin/", 0o755, 0, 0),
		link(tar.TypeLink, "./usr/bin/busybox-hardlink", "bin/busybox"),
		dir("./home/user/", 0o700, 1000, 1000),
		file("./home/user/notes file", 0o600, 1000, 1000, "mine\n"),
		dir("./dev/", 0o755, 0, 0),
		console, null,
		dir("./run/", 0o755, 0, 0),
		fifo,
		dir("./tmp/", 0o1777, 0, 0),
		dir("./ro/", 0o555, 0, 0),
		file("./ro/inside", 0o444, 0, 0, "read-only\n"),
		dir("./var/mail/", 0o2775, 0, 8),
		link(tar.TypeSymlink, "./etc/mtab", "/proc/self/mounts"),
		file("./opt/implied/file", 0o644, 0, 0, "parents not listed\n"),
	}
}

// inode is what debugfs says about a path in the image.
type inode struct {
	typ, mode, user, group, links, device, target string
}

func stat(t *testing.T, img, p string) inode {
	t.Helper()
	out := debugfs(t, img, fmt.Sprintf("stat %q", p))
	field := func(re string) string {
		if m := regexp.MustCompile(re).FindStringSubmatch(out); m != nil {
			return m[1]
		}
		return ""
	}
	return inode{
		typ:    field(`Type: (\w+( special)?)`),
		mode:   field(`Mode:\s+(\d+)`),
		user:   field(`User:\s+(\d+)`),
		group:  field(`Group:\s+(\d+)`),
		links:  field(`Links: (\d+)`),
		device: field(`Device major/minor number: (\d+:\d+)`),
		target: field(`Fast link dest: "([^"]*)"`),
	}
}

func debugfs(t *testing.T, img, request string) string {
	t.Helper()
	_, dbg, _, _ := tools()
	out, err := exec.Command(dbg, "-R", request, img).CombinedOutput()
	if err != nil || strings.Contains(string(out), "not found by ext2_lookup") {
		t.Fatalf("debugfs -R %s: %v\n%s", request, err, out)
	}
	return string(out)
}

func checkSample(t *testing.T, img string) {
	t.Helper()
	if got := debugfs(t, img, `cat "/etc/hostname"`); !strings.Contains(got, "guest\n") {
		t.Errorf("/etc/hostname: %q", got)
	}
	if got := debugfs(t, img, `cat "/home/user/notes file"`); !strings.Contains(got, "mine\n") {
		t.Errorf("notes file: %q", got)
	}
	for p, want := range map[string]inode{
		"/":                         {typ: "directory", mode: "0755", user: "0", group: "0"},
		"/etc/shadow":               {typ: "regular", mode: "0640", user: "0", group: "42", links: "1"},
		"/bin/busybox":              {typ: "regular", mode: "0755", user: "0", group: "0", links: "2"},
		"/usr/bin/busybox-hardlink": {typ: "regular", mode: "0755", user: "0", group: "0", links: "2"},
		"/bin/sh":                   {typ: "symlink", mode: "0777", user: "0", group: "0", target: "busybox"},
		"/etc/mtab":                 {typ: "symlink", mode: "0777", user: "0", group: "0", target: "/proc/self/mounts"},
		"/bin/ping":                 {typ: "regular", mode: "04755", user: "0", group: "0", links: "1"},
		"/home/user":                {typ: "directory", mode: "0700", user: "1000", group: "1000"},
		"/home/user/notes file":     {typ: "regular", mode: "0600", user: "1000", group: "1000", links: "1"},
		"/dev/console":              {typ: "character special", mode: "0620", user: "0", group: "5", device: "05:01"},
		"/dev/null":                 {typ: "character special", mode: "0666", user: "0", group: "0", device: "01:03"},
		"/run/initctl":              {typ: "FIFO", mode: "0600", user: "0", group: "0"},
		"/tmp":                      {typ: "directory", mode: "01777", user: "0", group: "0"},
		"/ro":                       {typ: "directory", mode: "0555", user: "0", group: "0"},
		"/ro/inside":                {typ: "regular", mode: "0444", user: "0", group: "0", links: "1"},
		"/var/mail":                 {typ: "directory", mode: "02775", user: "0", group: "8"},
		"/opt":                      {typ: "directory", mode: "0755", user: "0", group: "0"},
		"/opt/implied":              {typ: "directory", mode: "0755", user: "0", group: "0"},
	} {
		got := stat(t, img, p)
		if want.links == "" {
			got.links = ""
		}
		if got != want {
			t.Errorf("%s: %+v, want %+v", p, got, want)
		}
	}
	if got := debugfs(t, img, `ea_list "/bin/ping"`); !strings.Contains(got, "security.capability (20) = 01 00 00 02 00 20") {
		t.Errorf("/bin/ping xattrs: %s", got)
	}
}

func TestFromTar(t *testing.T) {
	needE2fsprogs(t)
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			tarball := writeTar(t, sampleRootfs(), gz)
			img := filepath.Join(t.TempDir(), "root.img")
			if err := FromTar(tarball, t.TempDir(), img, 32<<20); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(img)
			if err != nil || fi.Size() != 32<<20 {
				t.Fatalf("image: %v %v", fi, err)
			}
			checkSample(t, img)
		})
	}
}

// TestFromTarUnprivileged runs the same build as user nobody: owners, devices and the file
// capability still come out as the tarball says.
func TestFromTarUnprivileged(t *testing.T) {
	needE2fsprogs(t)
	if os.Getenv("ROOTDISK_AS_NOBODY") != "" {
		// The child: build what the parent asked for.
		args := strings.Split(os.Getenv("ROOTDISK_AS_NOBODY"), "\n")
		if err := FromTar(args[0], args[1], args[2], 32<<20); err != nil {
			t.Fatal(err)
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("already unprivileged: TestFromTar covers it")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) not found")
	}
	dir, err := os.MkdirTemp("", "rootdisk-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	tarball := writeTar(t, sampleRootfs(), false)
	if err := os.Rename(tarball, filepath.Join(dir, "rootfs.tar")); err != nil {
		t.Fatal(err)
	}
	work, img := filepath.Join(dir, "work"), filepath.Join(dir, "root.img")
	// A copy of the test binary nobody can run, wherever go test keeps it.
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(dir, "rootdisk.test")
	if err := os.WriteFile(child, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", child, "-test.run=^TestFromTarUnprivileged$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ROOTDISK_AS_NOBODY="+strings.Join([]string{filepath.Join(dir, "rootfs.tar"), work, img}, "\n"), "HOME=/nonexistent")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(work, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	checkSample(t, img)
}

func TestFromDir(t *testing.T) {
	needE2fsprogs(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "sbin", "init"), []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sbin/init", filepath.Join(root, "init")); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "root.img")
	if err := FromDir(root, img, 16<<20); err != nil {
		t.Fatal(err)
	}
	if got := debugfs(t, img, "cat /sbin/init"); !strings.Contains(got, "echo hi") {
		t.Errorf("/sbin/init: %q", got)
	}
	if got := stat(t, img, "/sbin/init"); got.mode != "0755" || got.typ != "regular" {
		t.Errorf("/sbin/init: %+v", got)
	}
	if got := stat(t, img, "/init"); got.target != "sbin/init" {
		t.Errorf("/init: %+v", got)
	}
}

func TestRefusesEscapesAndLayers(t *testing.T) {
	needE2fsprogs(t)
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		entries []entry
		want    string
	}{
		{"dotdot", []entry{file("../escape", 0o644, 0, 0, "x")}, `tar entry "../escape": the path leaves the root`},
		{"inner dotdot", []entry{file("a/../../escape", 0o644, 0, 0, "x")}, "the path leaves the root"},
		{"through a symlink", []entry{link(tar.TypeSymlink, "out", outside), file("out/escape", 0o644, 0, 0, "x")},
			`tar entry "out/escape": goes through the symlink /out`},
		{"hard link out", []entry{link(tar.TypeLink, "pw", "../../etc/passwd")}, `hard link to "../../etc/passwd": not a file inside the root`},
		{"hard link to nothing", []entry{link(tar.TypeLink, "pw", "missing")}, "must come earlier in the tarball"},
		{"whiteout", []entry{file("etc/.wh.passwd", 0o644, 0, 0, "")}, "whiteout: pass a flattened root filesystem"},
		{"debugfs cannot name it", []entry{file("a\"b", 0o644, 1000, 0, "")}, "double quote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := FromTar(writeTar(t, tc.entries, false), t.TempDir(), filepath.Join(t.TempDir(), "root.img"), 8<<20)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
			if left, _ := os.ReadDir(outside); len(left) != 0 {
				t.Errorf("wrote outside the root: %v", left)
			}
		})
	}
}

func TestDiskSize(t *testing.T) {
	needE2fsprogs(t)
	tarball := writeTar(t, []entry{file("big", 0o644, 0, 0, strings.Repeat("x", 4<<20))}, false)
	err := FromTar(tarball, t.TempDir(), filepath.Join(t.TempDir(), "root.img"), 2<<20)
	if err == nil || !strings.Contains(err.Error(), "raise --disk-size") || !strings.Contains(err.Error(), "4.0 MiB in 1 entries") {
		t.Errorf("too small: %v", err)
	}
	for _, size := range []int64{0, -512, 1000} {
		if err := FromDir(t.TempDir(), filepath.Join(t.TempDir(), "root.img"), size); err == nil || !strings.Contains(err.Error(), "512-byte sectors") {
			t.Errorf("size %d: %v", size, err)
		}
	}
}
