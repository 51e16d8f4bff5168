package push

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/virtpod/virtpod/pkg/image/ociimage"
)

// writeArchive writes an image archive tagged tag into dir.
func writeArchive(t *testing.T, dir, file, tag, content string) string {
	t.Helper()
	l := ociimage.NewLayer("x")
	if err := l.File("/hello", 0o644, []byte(content)); err != nil {
		t.Fatal(err)
	}
	img, err := ociimage.Image(v1.Config{Entrypoint: []string{"/hello"}}, l)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, file)
	if err := ociimage.WriteArchive(p, tag, img); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestArchives pushes two archives of a folder to a registry (go-containerregistry's, over
// HTTP), as builds and as a release, and reads them back by digest.
func TestArchives(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	reg := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	writeArchive(t, dir, "a.tar", "localhost/virtpod/a:dev", "a")
	writeArchive(t, dir, "b.tar", "localhost/virtpod/tools/b:1.0", "b")
	tars, err := Dir(dir)
	if err != nil || len(tars) != 2 {
		t.Fatalf("Dir: %q %v", tars, err)
	}

	dev, err := Archives(Options{Registry: reg, Insecure: true}, tars...)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := Archives(Options{Registry: reg, Insecure: true, Version: "v0.2.0"}, tars...)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := NewLock(rel)
	if err != nil {
		t.Fatal(err)
	}
	b := lock["virtpod/tools/b"]
	if b.Tag != reg+"/virtpod/tools/b:v0.2.0" || b.Source != "localhost/virtpod/tools/b:1.0" || b.Repository() != reg+"/virtpod/tools/b" {
		t.Errorf("b pushed as %+v", b)
	}
	if dev[0].Tag != reg+"/virtpod/a:dev" {
		t.Errorf("a pushed as %+v", dev[0])
	}
	if dev[0].Digest == rel[0].Digest {
		t.Errorf("a release and a build have the same digest %s: the version label is missing", dev[0].Digest)
	}
	for i, p := range append(dev, rel...) {
		want := "" // builds keep their config
		if i >= len(dev) {
			want = "v0.2.0"
		}
		ref, err := name.NewDigest(p.Digest, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.Image(ref)
		if err != nil {
			t.Fatalf("%s: %v", p.Digest, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got := cf.Config.Labels[VersionLabel]; got != want {
			t.Errorf("%s: label %s=%q, want %q", p.Tag, VersionLabel, got, want)
		}
		byTag, err := name.NewTag(p.Tag, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		d, err := remote.Head(byTag)
		if err != nil {
			t.Fatal(err)
		}
		if p.Digest != byTag.Context().Digest(d.Digest.String()).String() {
			t.Errorf("%s resolves to %s, the lock says %s", p.Tag, d.Digest, p.Digest)
		}
	}
	// An archive pushed to a path of its own as well: the same image, under both.
	renamed, err := Archives(Options{Registry: reg, Insecure: true, Version: "v0.2.0"}, tars[0], tars[0]+"=virtpod/other")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := NewLock(renamed); err != nil || l["virtpod/other"].Tag != reg+"/virtpod/other:v0.2.0" ||
		l["virtpod/other"].Source != "localhost/virtpod/a:dev" || l["virtpod/a"].Tag != reg+"/virtpod/a:v0.2.0" ||
		strings.TrimPrefix(l["virtpod/other"].Digest, reg+"/virtpod/other") != strings.TrimPrefix(l["virtpod/a"].Digest, reg+"/virtpod/a") {
		t.Errorf("an archive pushed under a path of its own: %+v %v", l, err)
	}
	if _, err := NewLock(append(dev, dev[0])); err == nil {
		t.Error("a lock with one path twice")
	}
	if _, err := Archives(Options{}, tars...); err == nil || !strings.Contains(err.Error(), "no registry") {
		t.Errorf("no registry: %v", err)
	}
	lf := filepath.Join(dir, "lock.json")
	if err := WriteLock(lf, lock); err != nil {
		t.Fatal(err)
	}
	back, err := ReadLock(lf)
	if err != nil || back["virtpod/a"] != lock["virtpod/a"] {
		t.Errorf("lock round trip: %+v %v", back, err)
	}
}
