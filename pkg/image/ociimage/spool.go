package ociimage

import (
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// spool writes the layer, compressed, to a new file in l.SpoolDir in one pass that also takes
// both digests, and returns a layer read from that file. Build's in-memory cache would hold a
// multi-GB root disk's compressed bytes in memory; tarball.LayerFromFile would read the file
// twice more for the digests before the archive is even written.
func (l *Layer) spool(mtime time.Time) (v1.Layer, error) {
	f, err := os.CreateTemp(l.SpoolDir, "layer-*.tar.gz")
	if err != nil {
		return nil, fmt.Errorf("layer %s: spool file: %w", l.Name, err)
	}
	sl, err := l.writeSpool(f, mtime)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("layer %s: %w", l.Name, err)
	}
	return sl, nil
}

func (l *Layer) writeSpool(f *os.File, mtime time.Time) (*spooledLayer, error) {
	compressed, uncompressed := sha256.New(), sha256.New()
	counter := &countingWriter{w: io.MultiWriter(f, compressed)}
	// Level 1: disk images are mostly zero runs, where it is about four times faster than the
	// other layers' best compression, for a slightly larger layer.
	gz, err := gzip.NewWriterLevel(counter, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	if err := l.WriteTar(io.MultiWriter(gz, uncompressed), mtime); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return &spooledLayer{
		path:   f.Name(),
		digest: sum(compressed),
		diffID: sum(uncompressed),
		size:   counter.n,
	}, nil
}

func sum(h hash.Hash) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", h.Sum(nil))}
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// spooledLayer is a gzip-compressed layer in a file, with its digests known.
type spooledLayer struct {
	path           string
	digest, diffID v1.Hash
	size           int64
}

func (s *spooledLayer) Digest() (v1.Hash, error)            { return s.digest, nil }
func (s *spooledLayer) DiffID() (v1.Hash, error)            { return s.diffID, nil }
func (s *spooledLayer) Size() (int64, error)                { return s.size, nil }
func (s *spooledLayer) MediaType() (types.MediaType, error) { return types.DockerLayer, nil }
func (s *spooledLayer) Compressed() (io.ReadCloser, error)  { return os.Open(s.path) }

func (s *spooledLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return nil, err
	}
	gz, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &gzipFile{Reader: gz, f: f}, nil
}

type gzipFile struct {
	*gzip.Reader
	f *os.File
}

func (g *gzipFile) Close() error {
	err := g.Reader.Close()
	if ferr := g.f.Close(); err == nil {
		err = ferr
	}
	return err
}
