package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
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
