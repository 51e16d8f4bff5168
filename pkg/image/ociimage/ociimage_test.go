package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func readTar(t *testing.T, b []byte) []*tar.Header {
	t.Helper()
	var hs []*tar.Header
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hs
		}
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
}

func TestLayerTarIsSortedWithParentsAndFixedTimes(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, []byte("host file"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := NewLayer("test")
	for _, err := range []error{
		l.File("/z/file", 0o640, []byte("data")),
		l.Symlink("/a/link", "../z/file"),
		l.HostFile("/m/host", src, 0o755),
		l.Dir("/tmp", 0o777|os.ModeSticky),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	mtime := time.Unix(1700000000, 0)
	var buf bytes.Buffer
	if err := l.WriteTar(&buf, mtime); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range readTar(t, buf.Bytes()) {
		got = append(got, h.Name)
		if !h.ModTime.Equal(mtime) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" {
			t.Errorf("%s: mtime %v owner %d:%d %q", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname)
		}
		switch h.Name {
		case "a/link":
			if h.Typeflag != tar.TypeSymlink || h.Linkname != "../z/file" {
				t.Errorf("a/link: %c -> %q", h.Typeflag, h.Linkname)
			}
		case "m/host":
			if h.Mode != 0o755 || h.Size != int64(len("host file")) {
				t.Errorf("m/host: mode %o size %d", h.Mode, h.Size)
			}
		case "tmp/":
			if h.Mode != 0o1777 {
				t.Errorf("tmp: mode %o, want 1777", h.Mode)
			}
		case "z/":
			if h.Typeflag != tar.TypeDir || h.Mode != 0o755 {
				t.Errorf("implied parent z/: %c %o", h.Typeflag, h.Mode)
			}
		}
	}
	want := []string{"a/", "a/link", "m/", "m/host", "tmp/", "z/", "z/file"}
	if !slices.Equal(got, want) {
		t.Fatalf("entries %q, want %q", got, want)
	}
	var again bytes.Buffer
	if err := l.WriteTar(&again, mtime); err != nil || !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Fatalf("writing the same layer twice gave different bytes (%v)", err)
	}
}

func TestLayerRejectsConflicts(t *testing.T) {
	l := NewLayer("test")
	if err := l.Symlink("/lib", "usr/lib"); err != nil {
		t.Fatal(err)
	}
	if err := l.File("/lib/x", 0o644, nil); err == nil || !strings.Contains(err.Error(), "/lib is a") {
		t.Errorf("file under a symlink: %v", err)
	}
	if err := l.File("/etc/a", 0o644, []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := l.File("/etc/a", 0o644, []byte("1")); err != nil {
		t.Errorf("the same file twice: %v", err)
	}
	if err := l.File("/etc/a", 0o644, []byte("2")); err == nil {
		t.Error("different contents at one path: no error")
	}
	if err := l.Dir("/etc", 0o700); err != nil {
		t.Errorf("explicit mode for an implied parent: %v", err)
	}
	if err := l.Dir("/etc", 0o755); err == nil {
		t.Error("a directory with two modes: no error")
	}
	if err := l.File("relative", 0o644, nil); err == nil {
		t.Error("relative path: no error")
	}
}

// TestHostPathReproducesSymlinks: every link on the way to a host file is in the layer, so the
// file is found under the name programs use.
func TestHostPathReproducesSymlinks(t *testing.T) {
	dir := t.TempDir()
	mustDo(t, os.MkdirAll(filepath.Join(dir, "usr", "lib"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(dir, "usr", "lib", "libx.so.1.2"), []byte("lib"), 0o644))
	mustDo(t, os.Symlink("libx.so.1.2", filepath.Join(dir, "usr", "lib", "libx.so.1")))
	mustDo(t, os.Symlink("usr/lib", filepath.Join(dir, "lib")))
	mustDo(t, os.Symlink(filepath.Join(dir, "lib", "libx.so.1"), filepath.Join(dir, "abs")))

	l := NewLayer("test")
	real, err := l.HostPath(filepath.Join(dir, "abs"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "usr", "lib", "libx.so.1.2"); real != want {
		t.Errorf("resolved to %s, want %s", real, want)
	}
	want := map[string]string{
		filepath.Join(dir, "abs"):                       filepath.Join(dir, "lib", "libx.so.1"),
		filepath.Join(dir, "lib"):                       "usr/lib",
		filepath.Join(dir, "usr", "lib", "libx.so.1"):   "libx.so.1.2",
		filepath.Join(dir, "usr", "lib", "libx.so.1.2"): "",
	}
	for p, target := range want {
		e, ok := l.entries[p]
		if !ok || e.target != target {
			t.Errorf("%s: %+v (present %v), want target %q", p, e, ok, target)
		}
	}
	if _, err := l.HostPath(dir); err == nil {
		t.Error("a directory: no error")
	}
}

// TestHostPathInResolvesInsideRoot: a file of another system's tree lands at its own path, and
// an absolute link there (Debian's /lib64/ld-linux-x86-64.so.2) is that tree's, never this
// machine's file of the same name.
func TestHostPathInResolvesInsideRoot(t *testing.T) {
	root := t.TempDir()
	mustDo(t, os.MkdirAll(filepath.Join(root, "usr", "lib", "x86_64-linux-gnu"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(root, "usr", "lib", "x86_64-linux-gnu", "ld.so"), []byte("the tree's"), 0o755))
	mustDo(t, os.Symlink("usr/lib", filepath.Join(root, "lib")))
	mustDo(t, os.MkdirAll(filepath.Join(root, "usr", "lib64"), 0o755))
	mustDo(t, os.Symlink("usr/lib64", filepath.Join(root, "lib64")))
	mustDo(t, os.Symlink("/lib/x86_64-linux-gnu/ld.so", filepath.Join(root, "usr", "lib64", "ld.so")))

	l := NewLayer("test")
	real, err := l.HostPathIn(root, "/lib64/ld.so")
	if err != nil {
		t.Fatal(err)
	}
	if real != "/usr/lib/x86_64-linux-gnu/ld.so" {
		t.Errorf("resolved to %s, want the tree's /usr/lib/x86_64-linux-gnu/ld.so", real)
	}
	for p, target := range map[string]string{
		"/lib64": "usr/lib64", "/usr/lib64/ld.so": "/lib/x86_64-linux-gnu/ld.so", "/lib": "usr/lib",
		"/usr/lib/x86_64-linux-gnu/ld.so": "",
	} {
		e, ok := l.entries[p]
		if !ok || e.target != target {
			t.Errorf("%s: %+v (present %v), want target %q", p, e, ok, target)
		}
	}
	if e := l.entries["/usr/lib/x86_64-linux-gnu/ld.so"]; e.source != filepath.Join(root, "usr", "lib", "x86_64-linux-gnu", "ld.so") {
		t.Errorf("the file's source is %q, want the tree's", e.source)
	}
	if _, err := l.HostPathIn("relative", "/x"); err == nil {
		t.Error("a relative root: no error")
	}
}

func TestImageArchiveRoundTrip(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	l := NewLayer("hello")
	mustDo(t, l.File("/hello", 0o755, []byte("#!/bin/sh\necho hi\n")))
	img, err := Image(v1.Config{Entrypoint: []string{"/hello"}, User: "1000"}, l)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "sub", "img.tar")
	if err := WriteArchive(file, "localhost/virtpod/test:dev", img); err != nil {
		t.Fatal(err)
	}
	back, err := tarball.ImageFromPath(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || cf.Created.Unix() != 1700000000 ||
		!slices.Equal(cf.Config.Entrypoint, []string{"/hello"}) || cf.Config.User != "1000" || !slices.Equal(cf.Config.Env, []string{DefaultPath}) {
		t.Errorf("config %+v", cf)
	}
	if len(cf.History) != 1 || cf.History[0].CreatedBy != "virtpod imagebuild: hello" {
		t.Errorf("history %+v", cf.History)
	}
	// The archive names the image as given, which is what ctr imports it as.
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(m); len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{"localhost/virtpod/test:dev"}) {
		t.Errorf("manifest.json %s", b)
	}
	d1, _ := img.Digest()
	d2, _ := back.Digest()
	if d1 != d2 {
		t.Errorf("digest changed through the archive: %s, %s", d1, d2)
	}
	if err := WriteArchive(file, "Not A Tag!", img); err == nil || !strings.Contains(err.Error(), "want e.g.") {
		t.Errorf("bad tag: %v", err)
	}
}

func TestEpoch(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "")
	if e, err := Epoch(); err != nil || e.Unix() != 0 {
		t.Errorf("unset: %v %v", e, err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	if _, err := Epoch(); err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Errorf("bad value: %v", err)
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSpooledLayer: a layer built through a file has the same contents (diff ID) as one built in
// memory, digests that match its bytes, and survives an archive round trip.
func TestSpooledLayer(t *testing.T) {
	src := filepath.Join(t.TempDir(), "disk")
	data := bytes.Repeat([]byte("data"), 1<<18)
	mustDo(t, os.WriteFile(src, append(make([]byte, 8<<20), data...), 0o644))
	newLayer := func(spool string) *Layer {
		l := NewLayer("disk")
		l.SpoolDir = spool
		mustDo(t, l.HostFile("/disk/root.img", src, 0o644))
		return l
	}
	spoolDir := t.TempDir()
	mtime := time.Unix(0, 0)
	spooled, err := newLayer(spoolDir).Build(mtime)
	if err != nil {
		t.Fatal(err)
	}
	inMemory, err := newLayer("").Build(mtime)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := spooled.DiffID()
	d2, _ := inMemory.DiffID()
	if d1 != d2 {
		t.Errorf("diff IDs differ: spooled %s, in memory %s", d1, d2)
	}
	files, _ := filepath.Glob(filepath.Join(spoolDir, "*"))
	if len(files) != 1 {
		t.Fatalf("spool dir holds %v, want one file", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	digest, _ := spooled.Digest()
	size, _ := spooled.Size()
	want := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sha256.Sum256(b))}
	if digest != want || size != int64(len(b)) {
		t.Errorf("digest %s size %d, the file has %s and %d bytes", digest, size, want, len(b))
	}
	img, err := Image(v1.Config{}, newLayer(spoolDir))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "img.tar")
	mustDo(t, WriteArchive(file, "localhost/virtpod/spool:test", img))
	back, err := tarball.ImageFromPath(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := back.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %v %v", layers, err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no disk/root.img in the layer: %v", err)
		}
		if h.Name == "disk/root.img" {
			got, _ := io.ReadAll(tr)
			if !bytes.Equal(got[8<<20:], data) || len(got) != 8<<20+len(data) {
				t.Error("disk/root.img changed through the spooled layer")
			}
			break
		}
	}
}

// TestHoleReader: a sparse file reads the same through holeReader as through the file system.
func TestHoleReader(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sparse")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mustDo(t, f.Truncate(64<<20))
	for _, off := range []int64{0, 5<<20 + 7, 32 << 20, 64<<20 - 4} {
		if _, err := f.WriteAt([]byte("data"), off); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{int64(len(want)), 1 << 20} { // the whole file, and a prefix
		got, err := io.ReadAll(newHoleReader(f, size))
		if err != nil || !bytes.Equal(got, want[:size]) {
			t.Errorf("size %d: read %d bytes (%v), not the file's contents", size, len(got), err)
		}
	}
}
