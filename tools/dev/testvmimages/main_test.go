package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/virtpod/virtpod/pkg/disk/diskfile"
	"github.com/virtpod/virtpod/pkg/image/vmimage"
	"github.com/virtpod/virtpod/tests/prereq"
	"github.com/virtpod/virtpod/tools/dev/devcache"
)

// diskFile is one regular file under /disk of an image, with its first bytes.
type diskFile struct {
	name string
	size int64
	head string // path of a file holding its first 64 KiB
}

// disks reads the archive's image (by tag) and returns the files in /disk, and every other
// entry of /disk (directories, links) by name.
func disks(t *testing.T, archive, tag string) []diskFile {
	t.Helper()
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(archive, &ref)
	if err != nil {
		t.Fatalf("%s: no image %s: %v", archive, tag, err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	var out []diskFile
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := path.Clean("/" + h.Name)
		if path.Dir(p) != vmimage.DiskDir {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			t.Errorf("%s: %s is not a regular file (type %c)", tag, p, h.Typeflag)
			continue
		}
		head := filepath.Join(t.TempDir(), "head")
		b := make([]byte, 64<<10)
		n, _ := io.ReadFull(tr, b)
		if err := os.WriteFile(head, b[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		out = append(out, diskFile{name: path.Base(p), size: h.Size, head: head})
	}
	return out
}

func choose(files []diskFile) (string, error) {
	var es []diskfile.Entry
	for _, f := range files {
		es = append(es, diskfile.Entry{Name: f.name, Regular: true})
	}
	return diskfile.Choose(es)
}

// TestBuild: nobootloader holds one raw disk of zeros the runner accepts (and the firmware finds
// nothing on); twodisks holds two disk files and nothing to choose between them.
func TestBuild(t *testing.T) {
	out := t.TempDir()
	if err := build(out); err != nil {
		t.Fatal(err)
	}
	checkTestImages(t, out)
}

func checkTestImages(t *testing.T, dir string) {
	t.Helper()
	nb := disks(t, filepath.Join(dir, "nobootloader.tar"), noBootloaderTag)
	if len(nb) != 1 || nb[0].name != "root.img" || nb[0].size != 16<<20 {
		t.Fatalf("nobootloader's /disk: %+v, want root.img of 16 MiB", nb)
	}
	if b, _ := os.ReadFile(nb[0].head); strings.Trim(string(b), "\x00") != "" {
		t.Error("nobootloader's disk is not all zeros")
	}
	if f, err := diskfile.Format(nb[0].head); err != nil || f != diskfile.FormatRaw {
		t.Errorf("nobootloader's disk: %q, %v; want raw", f, err)
	}
	two := disks(t, filepath.Join(dir, "twodisks.tar"), twoDisksTag)
	if _, err := choose(two); len(two) != 2 || err == nil || !strings.Contains(err.Error(), "2 disk files (one.img, two.raw)") {
		t.Fatalf("twodisks' /disk: %+v, choose: %v", two, err)
	}
}

// TestMadeImages checks the archives `make test-images` wrote into $VIRTPOD_IMAGES (the
// Makefile's IMAGES_DIR): the Debian image has exactly one disk file, a qcow2 under a
// containerDisk name, which the runner picks; the two bad images are as TestBuild wants them.
func TestMadeImages(t *testing.T) {
	dir := os.Getenv("VIRTPOD_IMAGES")
	if dir == "" {
		dir = devcache.Dir("images")
	}
	archive := filepath.Join(dir, "debian.tar")
	_, err := os.Stat(archive)
	prereq.Need(t, err == nil, "no "+archive+": run make test-images (IMAGES_DIR="+dir+")")
	files := disks(t, archive, "localhost/virtpod/debian:dev")
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, f.name)
	}
	if !slices.Equal(names, []string{"debian-12.qcow2"}) {
		t.Fatalf("the Debian image's /disk holds %q, want exactly debian-12.qcow2", names)
	}
	if got, err := choose(files); err != nil || got != "debian-12.qcow2" {
		t.Errorf("the runner would pick %q, %v", got, err)
	}
	if f, err := diskfile.Format(files[0].head); err != nil || f != diskfile.FormatQCOW2 {
		t.Errorf("debian-12.qcow2 is %q, %v; want a standalone qcow2", f, err)
	}
	t.Logf("debian.tar: /disk/debian-12.qcow2, %.1f MiB", float64(files[0].size)/(1<<20))
	checkTestImages(t, dir)
}
