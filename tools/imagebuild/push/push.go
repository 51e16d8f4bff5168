// Package push copies image archives (the `docker save` format imagebuild writes) into an OCI
// registry with go-containerregistry, and says where each landed by digest. Any archive works:
// an image is named in the registry by its archive tag's path, with the registry in front, or
// by the path given with the archive (ARCHIVE=PATH).
package push

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// VersionLabel is the OCI label that carries a release's version in its images' config, so two
// releases of the same build are two images with their own digests.
const VersionLabel = "org.opencontainers.image.version"

// Options say where images go.
type Options struct {
	// Registry is HOST[:PORT], e.g. 10.217.0.1:5000 or ghcr.io/acme (a path prefix is kept).
	Registry string
	// Insecure pushes over plain HTTP; for a registry on a local address only.
	Insecure bool
	// Version, when set, is the tag every image gets (instead of its archive's tag) and the
	// value of VersionLabel in its config.
	Version string
	// Transport for the registry; nil is http.DefaultTransport.
	Transport http.RoundTripper
}

// Pushed is one image in the registry.
type Pushed struct {
	Source string `json:"source"` // the archive's tag, e.g. localhost/virtpod/runner:dev
	Path   string `json:"path"`   // its path in the registry, e.g. virtpod/runner
	Tag    string `json:"tag"`    // where it was pushed, e.g. 10.217.0.1:5000/virtpod/runner:v0.1.0
	Digest string `json:"digest"` // the reference by digest, e.g. 10.217.0.1:5000/virtpod/runner@sha256:...
}

// Repository is Digest without "@sha256:...": the name an image policy lists.
func (p Pushed) Repository() string { return strings.SplitN(p.Digest, "@", 2)[0] }

// Archives pushes every image of every archive, in order. An archive given as FILE=PATH is
// pushed to REGISTRY/PATH instead of its tag's path (one image only): the same archive may go
// to two paths, as an older runner image does when a test release ships it as the default.
func Archives(o Options, archives ...string) ([]Pushed, error) {
	if o.Registry == "" {
		return nil, fmt.Errorf("no registry: give one as HOST[:PORT][/PREFIX], e.g. 10.217.0.1:5000")
	}
	var all []Pushed
	for _, a := range archives {
		file, path, _ := strings.Cut(a, "=")
		p, err := archive(o, file, path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a, err)
		}
		all = append(all, p...)
	}
	return all, nil
}

func archive(o Options, file, path string) ([]Pushed, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(file) }
	manifest, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("not an image archive: %w", err)
	}
	if path != "" && len(manifest) != 1 {
		return nil, fmt.Errorf("=%s names one path for %d images: give the archive without a path", path, len(manifest))
	}
	var out []Pushed
	for _, d := range manifest {
		if len(d.RepoTags) == 0 {
			return nil, fmt.Errorf("an image without a tag (config %s): rebuild the archive with --tag", d.Config)
		}
		src := d.RepoTags[0]
		srcTag, err := name.NewTag(src)
		if err != nil {
			return nil, fmt.Errorf("tag %q: %w", src, err)
		}
		img, err := tarball.Image(opener, &srcTag)
		if err != nil {
			return nil, err
		}
		tag := srcTag.TagStr()
		if o.Version != "" {
			tag = o.Version
			if img, err = withVersion(img, o.Version); err != nil {
				return nil, err
			}
		}
		to := srcTag.RepositoryStr()
		if path != "" {
			to = path
		}
		p, err := one(o, img, to, tag)
		if err != nil {
			return nil, err
		}
		p.Source = src
		out = append(out, p)
	}
	return out, nil
}

// one pushes img as REGISTRY/path:tag.
func one(o Options, img v1.Image, path, tag string) (Pushed, error) {
	var opts []name.Option
	if o.Insecure {
		opts = append(opts, name.Insecure)
	}
	dst, err := name.NewTag(o.Registry+"/"+path+":"+tag, opts...)
	if err != nil {
		return Pushed{}, fmt.Errorf("registry %q, image %s:%s: %w", o.Registry, path, tag, err)
	}
	tr := o.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	if err := remote.Write(dst, img, remote.WithTransport(tr)); err != nil {
		return Pushed{}, fmt.Errorf("pushing %s: %w", dst, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return Pushed{}, err
	}
	return Pushed{Tag: dst.String(), Path: path, Digest: dst.Context().Digest(digest.String()).String()}, nil
}

// withVersion sets VersionLabel in img's config.
func withVersion(img v1.Image, version string) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg := cf.Config
	labels := map[string]string{}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	labels[VersionLabel] = version
	cfg.Labels = labels
	return mutate.Config(img, cfg)
}

// Dir lists the image archives (*.tar) in dir, sorted.
func Dir(dir string) ([]string, error) {
	tars, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	sort.Strings(tars)
	return tars, err
}

// Lock is what a push wrote, by the path each image went to in the registry (virtpod/runner).
type Lock map[string]Pushed

// NewLock indexes pushed by path; a path pushed twice is an error.
func NewLock(pushed []Pushed) (Lock, error) {
	l := Lock{}
	for _, p := range pushed {
		k := p.Path
		if prev, dup := l[k]; dup {
			return nil, fmt.Errorf("%s and %s both push to %s", prev.Source, p.Source, k)
		}
		l[k] = p
	}
	return l, nil
}

// WriteLock writes l as JSON.
func WriteLock(file string, l Lock) error {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o644)
}

// ReadLock reads a lock WriteLock wrote.
func ReadLock(file string) (Lock, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	l := Lock{}
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return l, nil
}
