package ociimage

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// DefaultPath is the PATH images get unless their config says otherwise.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Epoch is the timestamp of every file and of the image itself: $SOURCE_DATE_EPOCH when set
// (the reproducible-builds convention), else the Unix epoch, so the same inputs give the same
// image digest.
func Epoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970, or unset it", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// Image builds a linux/amd64 image from layers (bottom first) and the container config.
func Image(cfg v1.Config, layers ...*Layer) (v1.Image, error) {
	at, err := Epoch()
	if err != nil {
		return nil, err
	}
	adds := make([]mutate.Addendum, 0, len(layers))
	for _, l := range layers {
		built, err := l.Build(at)
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.Addendum{
			Layer:   built,
			History: v1.History{Created: v1.Time{Time: at}, CreatedBy: "virtpod imagebuild: " + l.Name},
		})
	}
	img, err := mutate.Append(empty.Image, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: at}
	if len(cfg.Env) == 0 {
		cfg.Env = []string{DefaultPath}
	}
	cf.Config = cfg
	return mutate.ConfigFile(img, cf)
}

// WriteArchive writes img to file as an image archive (the `docker save` format, which
// `ctr images import` reads) named tag. The file is replaced only once it is complete.
func WriteArchive(file, tag string, img v1.Image) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("tag %q: %w (want e.g. localhost/virtpod/runner:dev)", tag, err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tarball.Write(ref, img, tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}
