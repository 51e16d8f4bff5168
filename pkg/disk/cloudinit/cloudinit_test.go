package cloudinit_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/virtpod/virtpod/pkg/disk/cloudinit"
)

// readSeed opens the image with go-diskfs's reader and returns its label and files.
func readSeed(t *testing.T, path string) (string, map[string][]byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	if st.Size()%2048 != 0 {
		t.Errorf("image size %d is not a whole number of 2048-byte blocks", st.Size())
	}
	fsys, err := iso9660.Read(file.New(f, true), st.Size(), 0, 2048)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := fsys.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := fsys.ReadFile(e.Name())
		if err != nil {
			t.Fatalf("read %s: %v", e.Name(), err)
		}
		files[e.Name()] = b
	}
	return strings.TrimRight(fsys.Label(), " \x00"), files
}

func TestSeedReadsBack(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cidata.iso")
	// Bootstrap data is often larger than a block, binary-safe and gzip'd at times.
	user := append([]byte("#cloud-config\nruncmd:\n  - echo hi\n"), bytes.Repeat([]byte{0, 1, 2, 0xff}, 3000)...)
	net := []byte("version: 2\nethernets:\n  eth0:\n    dhcp4: false\n")
	seed := cloudinit.Seed{InstanceID: "0b5f6a43-1111-2222-3333-444455556666", Hostname: "web-1", UserData: user, NetworkConfig: net}
	if err := cloudinit.Write(path, seed); err != nil {
		t.Fatal(err)
	}
	label, files := readSeed(t, path)
	if label != cloudinit.Label {
		t.Errorf("volume label %q, want %q", label, cloudinit.Label)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	// Rock Ridge keeps the lower-case names with dashes that cloud-init looks for.
	if want := []string{"meta-data", "network-config", "user-data"}; !slices.Equal(names, want) {
		t.Fatalf("files %q, want %q", names, want)
	}
	if !bytes.Equal(files["user-data"], user) || !bytes.Equal(files["network-config"], net) {
		t.Error("user-data or network-config changed on the way")
	}
	if got, want := string(files["meta-data"]), "instance-id: 0b5f6a43-1111-2222-3333-444455556666\nlocal-hostname: web-1\n"; got != want {
		t.Errorf("meta-data %q, want %q", got, want)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("image mode %v, want 0600: it holds the user-data", st.Mode())
	}

	// A rewrite (the runner's next start) replaces the image; no network-config this time, and
	// no scratch files are left beside it.
	seed.NetworkConfig, seed.UserData = nil, []byte("#cloud-config\n")
	if err := cloudinit.Write(path, seed); err != nil {
		t.Fatal(err)
	}
	if _, files = readSeed(t, path); len(files) != 2 || string(files["user-data"]) != "#cloud-config\n" {
		t.Fatalf("rewritten seed holds %d files: %q", len(files), files)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 1 {
		var n []string
		for _, e := range left {
			n = append(n, e.Name())
		}
		t.Fatalf("the directory holds %q, want only the image", n)
	}
}

func TestEmptyUserData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cidata.iso")
	if err := cloudinit.Write(path, cloudinit.Seed{InstanceID: "i-1", Hostname: "vm"}); err != nil {
		t.Fatal(err)
	}
	if _, files := readSeed(t, path); len(files["user-data"]) != 0 || files["user-data"] == nil {
		t.Fatalf("want an empty user-data file, got %q", files)
	}
}

// TestRejectsUnsafeMetaData: meta-data is YAML, so a value that could add a key is refused with
// the field's name, and nothing is written.
func TestRejectsUnsafeMetaData(t *testing.T) {
	for name, s := range map[string]cloudinit.Seed{
		"newline in instance-id": {InstanceID: "i-1\nlocal-hostname: evil", Hostname: "vm"},
		"empty instance-id":      {Hostname: "vm"},
		"hostname with colon":    {InstanceID: "i-1", Hostname: "vm: x"},
		"hostname too long":      {InstanceID: "i-1", Hostname: strings.Repeat("a", 64)},
	} {
		path := filepath.Join(t.TempDir(), "cidata.iso")
		err := cloudinit.Write(path, s)
		field := "instance-id"
		if strings.HasPrefix(name, "hostname") {
			field = "local-hostname"
		}
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: Write = %v, want an error naming %s", name, err, field)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: an image was written", name)
		}
	}
}
