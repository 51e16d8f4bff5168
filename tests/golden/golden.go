// Package golden compares test output with files in a package's testdata folder; `go test
// ./pkg/... -update` rewrites them.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// Check compares got with testdata/<file>, rewriting the file under -update.
func Check(t *testing.T, file string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", file)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it if the change is intended):\n--- got\n%s--- want\n%s", path, got, want)
	}
}
