package podcontrol

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// names are the entries of dir, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	return got
}

// TestWriteFile: the agent's file is made with its data, readable by its owner alone, the
// runner's user's (the agent is root on the node); nothing else is left in the directory.
func TestWriteFile(t *testing.T) {
	root := controlRoot(t, "pod")
	ctl := Control{root, "pod"}
	path := filepath.Join(root, "pod", "targets.json")
	data := []byte(`{"root":10737418240,"disk-data":1073741824}`)
	err := ctl.WriteFile("targets.json", data)
	if os.Geteuid() != 0 {
		// Without CAP_CHOWN the file cannot be the runner's user's: refused, and nothing
		// half-made stays behind for a reader to take.
		if err == nil {
			t.Fatal("written without making it the runner's user's")
		}
		if got := names(t, filepath.Join(root, "pod")); len(got) != 0 {
			t.Fatalf("a failed write left %v", got)
		}
		t.Skip("not root: the owner cannot be the runner's user")
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != string(data) {
		t.Fatalf("the file holds %q (%v), want %q", got, err, data)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o400 {
		t.Errorf("the file is %v, want a regular file of mode 0400", fi.Mode())
	}
	if st := fi.Sys().(*syscall.Stat_t); int64(st.Uid) != vmv1.RunnerUID || int64(st.Gid) != vmv1.RunnerGID {
		t.Errorf("the file is %d:%d, want the runner's %d:%d", st.Uid, st.Gid, vmv1.RunnerUID, vmv1.RunnerGID)
	}
	if got := names(t, filepath.Join(root, "pod")); !slices.Equal(got, []string{"targets.json"}) {
		t.Errorf("the directory holds %v, want the file alone", got)
	}
}

// TestWriteFileRefuses: a path instead of a name is refused; a file already there, and a
// symlink the pod planted under the name (to a file outside its directory, or to one inside)
// are refused and left as they were, their targets too.
func TestWriteFileRefuses(t *testing.T) {
	root := controlRoot(t, "pod", "other")
	ctl := Control{root, "pod"}
	dir := filepath.Join(root, "pod")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"../other/targets.json", "sub/targets.json", "/etc/targets.json", "", ".", ".."} {
		if err := ctl.WriteFile(name, []byte("x")); err == nil {
			t.Errorf("wrote %q", name)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "other", "targets.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was written outside the directory: %v", err)
	}

	precious := filepath.Join(root, "other", "precious")
	must(os.WriteFile(precious, []byte("keep"), 0o644))
	inside := filepath.Join(dir, "inside")
	must(os.WriteFile(inside, []byte("mine"), 0o644))
	for _, c := range []struct {
		what  string
		plant func(path string) error
	}{
		{"an existing file", func(p string) error { return os.WriteFile(p, []byte("old"), 0o644) }},
		{"an absolute symlink out of the directory", func(p string) error { return os.Symlink(precious, p) }},
		{"a relative symlink out of the directory", func(p string) error { return os.Symlink("../other/precious", p) }},
		{"a symlink to a file inside", func(p string) error { return os.Symlink("inside", p) }},
		{"a dangling symlink out of the directory", func(p string) error { return os.Symlink("../other/made-by-the-agent", p) }},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o755) }},
	} {
		path := filepath.Join(dir, "targets.json")
		must(c.plant(path))
		before, err := os.Lstat(path)
		must(err)
		link, _ := os.Readlink(path)
		if err := ctl.WriteFile("targets.json", []byte(`{"root":1}`)); err == nil {
			t.Errorf("%s: written over", c.what)
		} else if !strings.Contains(err.Error(), "targets.json") {
			t.Errorf("%s: the error does not name the file: %v", c.what, err)
		}
		after, err := os.Lstat(path)
		must(err)
		if after.Mode() != before.Mode() || after.Size() != before.Size() || !os.SameFile(before, after) {
			t.Errorf("%s: changed: %v %d → %v %d", c.what, before.Mode(), before.Size(), after.Mode(), after.Size())
		}
		if got, _ := os.Readlink(path); got != link {
			t.Errorf("%s: the link now points to %q, was %q", c.what, got, link)
		}
		if before.Mode().IsRegular() {
			if got, _ := os.ReadFile(path); string(got) != "old" {
				t.Errorf("%s: holds %q now", c.what, got)
			}
		}
		must(os.RemoveAll(path))
		if got := names(t, dir); !slices.Equal(got, []string{"inside"}) {
			t.Errorf("%s: the refused write left %v", c.what, got)
		}
	}
	for path, want := range map[string]string{precious: "keep", inside: "mine"} {
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("the link's target %s holds %q (%v), want %q", path, got, err, want)
		}
		fi, err := os.Stat(path)
		must(err)
		if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o644 || st.Uid != uint32(os.Geteuid()) {
			t.Errorf("the link's target %s is now %v, uid %d", path, fi.Mode(), st.Uid)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "other", "made-by-the-agent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dangling link's target was made: %v", err)
	}
}

// TestWriteFileRefusesALinkedDirectory: a control directory that is itself a symlink (to
// another pod's) is refused, and nothing is written in the other.
func TestWriteFileRefusesALinkedDirectory(t *testing.T) {
	root := controlRoot(t, "victim")
	if err := os.Symlink(filepath.Join(root, "victim"), filepath.Join(root, "linked")); err != nil {
		t.Fatal(err)
	}
	err := Control{root, "linked"}.WriteFile("targets.json", []byte("x"))
	if err == nil || !errors.Is(err, ErrRefused) {
		t.Fatalf("wrote through a linked directory: %v", err)
	}
	if got := names(t, filepath.Join(root, "victim")); len(got) != 0 {
		t.Fatalf("the other pod's directory holds %v", got)
	}
}

// TestWriteFileAppearsWhole: a reader polling for the file (the copier waits for targets.json
// so) finds it missing or whole, never empty or half-written: it takes what it reads first.
func TestWriteFileAppearsWhole(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: the file cannot be the runner's user's")
	}
	root := controlRoot(t, "pod")
	ctl := Control{root, "pod"}
	data := []byte(`{"root":10737418240,"disk-data":1073741824}`)
	for i := range 200 {
		name := "targets-" + strconv.Itoa(i) + ".json"
		path := filepath.Join(root, "pod", name)
		read := make(chan string, 1)
		go func() {
			for {
				b, err := os.ReadFile(path)
				if err == nil {
					read <- string(b)
					return
				}
				if !errors.Is(err, os.ErrNotExist) {
					read <- "error: " + err.Error()
					return
				}
			}
		}()
		if err := ctl.WriteFile(name, data); err != nil {
			t.Fatal(err)
		}
		if got := <-read; got != string(data) {
			t.Fatalf("write %d: a reader found %q, want the whole %q", i, got, data)
		}
	}
}
