package devcache

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRoot(t *testing.T) {
	t.Setenv("VIRTPOD_CACHE", "/srv/cache")
	if Root() != "/srv/cache" || Dir("guest") != "/srv/cache/guest" {
		t.Errorf("Root %q, Dir %q", Root(), Dir("guest"))
	}
	t.Setenv("VIRTPOD_CACHE", "")
	home, _ := os.UserHomeDir()
	if want := filepath.Join(home, ".cache", "virtpod"); Root() != want {
		t.Errorf("Root %q, want %q", Root(), want)
	}
}

func TestCurrent(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name           string
		path           string
		current, found bool
	}{
		{"no manifest: a build never completed", filepath.Join(dir, "none.json"), false, false},
		{"this version", write("v5.json", `{"version": 5, "kernelVersion": "6.1"}`), true, true},
		{"an older version", write("v4.json", `{"version": 4}`), false, true},
		{"unreadable", write("bad.json", `{"version":`), false, true},
	} {
		if current, found := Current(tc.path, 5); current != tc.current || found != tc.found {
			t.Errorf("%s: current %v found %v, want %v %v", tc.name, current, found, tc.current, tc.found)
		}
	}
}
