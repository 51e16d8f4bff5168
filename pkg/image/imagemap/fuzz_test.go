package imagemap_test

import (
	"testing"

	"github.com/virtpod/virtpod/pkg/image/imagemap"
)

// FuzzParse: any text parses without panicking, every problem names a real line, and whatever
// the map resolves to is an image reference the API server would accept.
func FuzzParse(f *testing.F) {
	f.Add("localhost/virtpod/runner localhost/virtpod/runner:tilt-1\n", "localhost/virtpod/runner:dev")
	f.Add("a:1 b:1\nb:1 a:1\n", "a:1")
	f.Add("x y z\n# c\n\nBad:1 x:1", "x:1")
	f.Add("r r:1\nr:1 q@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "r:2")
	f.Add("busybox docker.io/library/busybox:1.36\nindex.docker.io/library/alpine:3 alpine:3.20\n", "docker.io/library/busybox:latest")
	f.Fuzz(func(t *testing.T, text, ref string) {
		m, problems := imagemap.Parse(text)
		lines := 1
		for _, c := range text {
			if c == '\n' {
				lines++
			}
		}
		for _, p := range problems {
			if p.Line < 1 || p.Line > lines || p.Reason == "" {
				t.Fatalf("problem %+v does not name a line of %d", p, lines)
			}
		}
		got := m.Resolve(ref)
		if got != ref && !imagemap.ValidReference(got) {
			t.Fatalf("Resolve(%q) = %q, not an image reference", ref, got)
		}
	})
}
