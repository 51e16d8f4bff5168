// Package imagemap is the development image map: "when X is asked for, use Y". It parses the
// map's text, reports each bad line without losing the good ones, and resolves references.
package imagemap

import (
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// ReferencePattern is what an image reference must look like: [registry[:port]/]path[:tag]
// [@sha256:digest], lower-case path. The CRD's CEL rules use the same expression (a test keeps
// them equal), so a mapped image is one the API server would have accepted in a spec.
const ReferencePattern = `^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$`

var referenceRE = regexp.MustCompile(ReferencePattern)

// ValidReference reports whether s is an image reference.
func ValidReference(s string) bool { return len(s) <= 512 && referenceRE.MatchString(s) }

// Repository is ref without its tag and digest.
func Repository(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	slash := strings.LastIndexByte(ref, '/')
	if i := strings.LastIndexByte(ref, ':'); i > slash {
		ref = ref[:i]
	}
	return ref
}

// pinned reports whether ref names a tag or digest, not just a repository.
func pinned(ref string) bool { return Repository(ref) != ref }

// normalised is how the map compares references, on both sides: as a container runtime reads
// them, so busybox, docker.io/library/busybox and index.docker.io/library/busybox are one
// repository. full is the whole reference: a bare repository stands for its :latest, which is
// what a runtime pulls; beside a digest the tag is dropped, since the digest decides. repo is
// the repository alone. A reference the name package refuses though the pattern accepts it
// (a repository path over 255 characters) is compared as spelled.
func normalised(ref string) (full, repo string) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return ref, Repository(ref)
	}
	return r.Name(), r.Context().Name()
}
