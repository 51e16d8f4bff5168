// Package devcache is where virtpod's development builds are kept — the pinned Kubernetes
// binaries, the local cluster's state, the guest fixture, the Debian guest — and whether a kept
// build is current. The place is the Makefile's VIRTPOD_CACHE: $VIRTPOD_CACHE, else
// ~/.cache/virtpod.
package devcache

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// Root is the cache folder.
func Root() string {
	if c := os.Getenv("VIRTPOD_CACHE"); c != "" {
		return c
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "virtpod")
}

// Dir is one build's folder in the cache.
func Dir(name string) string { return filepath.Join(Root(), name) }

// Current reads the "version" a build wrote into its manifest when it completed: found says a
// manifest is there, current that its version is want. A build writes its manifest last, so a
// build cut short is never current.
func Current(manifest string, want int) (current, found bool) {
	b, err := os.ReadFile(manifest)
	if err != nil {
		return false, false
	}
	var m struct {
		Version int `json:"version"`
	}
	if json.Unmarshal(b, &m) != nil {
		return false, true
	}
	return m.Version == want, true
}
