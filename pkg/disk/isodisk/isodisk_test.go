package isodisk_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/virtpod/virtpod/pkg/disk/isodisk"
)

// TestReadsBack: the label and every file, with its exact bytes, as a guest's iso9660 driver
// would read them; nothing is left beside the image.
func TestReadsBack(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "disk-config.iso")
	want := map[string][]byte{"app.yaml": []byte("port: 8080\n"), "empty": {}, "Mixed_Case-1": bytes.Repeat([]byte{0, 1, 2}, 5000)}
	if err := isodisk.Write(path, "config", want); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	fsys, err := iso9660.Read(file.New(f, true), st.Size(), 0, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if label := strings.TrimRight(fsys.Label(), " \x00"); label != "config" {
		t.Errorf("label %q, want config", label)
	}
	entries, err := fsys.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	for _, e := range entries {
		r, err := fsys.OpenFile(e.Name(), os.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		got[e.Name()], _ = io.ReadAll(r)
	}
	if len(got) != len(want) {
		t.Fatalf("files %v, want %d", keys(got), len(want))
	}
	for name, data := range want {
		if !bytes.Equal(got[name], data) {
			t.Errorf("%s: %d bytes, want %d", name, len(got[name]), len(data))
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("left beside the image: %v", left)
	}
}

func keys(m map[string][]byte) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}

func TestRefuses(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		label string
		files map[string][]byte
		want  string
	}{
		{"", nil, "want 1-32 characters"},
		{strings.Repeat("l", 33), nil, "want 1-32 characters"},
		{"ok", map[string][]byte{"../escape": nil}, "file name"},
		{"ok", map[string][]byte{"..": nil}, "file name"},
	} {
		if err := isodisk.Write(filepath.Join(dir, "x.iso"), tc.label, tc.files); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("label %q files %v: %v, want %q", tc.label, keys(tc.files), err, tc.want)
		}
	}
}
