// Command testvmimages writes the VM images the end-to-end tests use to check that bad images
// fail clearly, a few MiB each, as image archives for the local cluster to import:
//
//	nobootloader.tar  localhost/virtpod/nobootloader:dev  /disk/root.img: 16 MiB of zeros, a
//	                  well-formed raw disk with nothing to boot (the runner exits 7)
//	twodisks.tar      localhost/virtpod/twodisks:dev      /disk/one.img and /disk/two.raw, 1 MiB
//	                  each and no root.img: no root disk to choose (the runner exits 8)
//
// Both carry the copy program like every VM image, so they also serve clusters without image
// volumes. `imagebuild vm` makes only valid images; these are wrong on purpose.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/virtpod/virtpod/pkg/image/ociimage"
	"github.com/virtpod/virtpod/pkg/image/vmimage"
)

// The tags tests/e2e refers to.
const (
	noBootloaderTag = "localhost/virtpod/nobootloader:dev"
	twoDisksTag     = "localhost/virtpod/twodisks:dev"
)

func main() {
	out := flag.String("out", "", "directory to write nobootloader.tar and twodisks.tar into (the Makefile's IMAGES_DIR)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "testvmimages: -out is required")
		os.Exit(2)
	}
	if err := build(*out); err != nil {
		fmt.Fprintln(os.Stderr, "testvmimages:", err)
		os.Exit(1)
	}
}

func build(out string) error {
	work, err := os.MkdirTemp("", "testvmimages-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	copier := filepath.Join(work, "vmcopy")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", copier, "github.com/virtpod/virtpod/cmd/vmcopy")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build vmcopy: %v\n%s", err, b)
	}
	zeros := func(name string, size int64) (string, error) {
		p := filepath.Join(work, name)
		f, err := os.Create(p)
		if err != nil {
			return "", err
		}
		defer f.Close()
		return p, f.Truncate(size)
	}

	empty, err := zeros("root.img", 16<<20)
	if err != nil {
		return err
	}
	img, err := vmimage.Image(vmimage.Files{Disk: empty, Copier: copier}, work)
	if err != nil {
		return err
	}
	if err := write(filepath.Join(out, "nobootloader.tar"), noBootloaderTag, img); err != nil {
		return err
	}

	one, err := zeros("one.img", 1<<20)
	if err != nil {
		return err
	}
	two, err := zeros("two.raw", 1<<20)
	if err != nil {
		return err
	}
	layers, err := vmimage.Layers(vmimage.Files{Disk: one, DiskName: "one.img", Copier: copier}, work)
	if err != nil {
		return err
	}
	second := ociimage.NewLayer("second disk")
	if err := second.HostFile(vmimage.DiskDir+"/two.raw", two, 0o644); err != nil {
		return err
	}
	img, err = ociimage.Image(v1.Config{}, append(layers, second)...)
	if err != nil {
		return err
	}
	return write(filepath.Join(out, "twodisks.tar"), twoDisksTag, img)
}

func write(file, tag string, img v1.Image) error {
	if err := ociimage.WriteArchive(file, tag, img); err != nil {
		return err
	}
	fi, err := os.Stat(file)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %s, %.1f MiB\n", file, tag, float64(fi.Size())/(1<<20))
	return nil
}
