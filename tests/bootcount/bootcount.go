// Package bootcount counts the guests a test package boots, per top-level test, for the timing
// report at the end of `make test` (tools/dev/ci/report): every boot costs CI time, so the
// report shows which tests pay for more than one.
package bootcount

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

var (
	mu     sync.Mutex
	counts = map[[2]string]int{}
)

// Add counts one boot of kind ("guests", "incoming", "runner pods") for the test named, or its
// parent when name is a subtest's.
func Add(testName, kind string) {
	top, _, _ := strings.Cut(testName, "/")
	mu.Lock()
	counts[[2]string{top, kind}]++
	mu.Unlock()
}

// Write records the counts as boots-<pkg>.tsv in $VIRTPOD_CI_DIR (set by make test); without it,
// nothing is written.
func Write(pkg string) error {
	dir := os.Getenv("VIRTPOD_CI_DIR")
	if dir == "" {
		return nil
	}
	mu.Lock()
	var lines []string
	for k, n := range counts {
		lines = append(lines, fmt.Sprintf("%s\t%s\t%s\t%d\n", pkg, k[0], k[1], n))
	}
	mu.Unlock()
	slices.Sort(lines)
	name := "boots-" + strings.ReplaceAll(pkg, "/", "-") + ".tsv"
	return os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(lines, "")), 0o644)
}
