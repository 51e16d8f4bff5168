// Package prereq decides what a test does when something it needs from the host is missing:
// skip with the reason on a developer's machine, fail under CI=true, where every prerequisite
// must have been installed.
package prereq

import (
	"os"
	"testing"

	"github.com/virtpod/virtpod/tools/dev/devcache"
)

// Need skips (or, under CI=true, fails) the test unless ok; why says what is missing and how to
// get it.
func Need(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: a missing prerequisite fails)", why)
	}
	t.Skip(why)
}

// Cache is virtpod's build cache, $VIRTPOD_CACHE or ~/.cache/virtpod.
func Cache() string {
	return devcache.Root()
}
