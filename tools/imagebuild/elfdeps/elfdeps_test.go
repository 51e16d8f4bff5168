package elfdeps

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMatchesTheLoader: for a dynamically linked host program, the libraries found by reading
// ELF headers are the ones the system's dynamic loader itself loads (ld.so --list).
func TestMatchesTheLoader(t *testing.T) {
	const loader = "/lib64/ld-linux-x86-64.so.2"
	prog := "/usr/bin/qemu-img" // many libraries, some only needed indirectly
	if _, err := os.Stat(prog); err != nil {
		prog = "/bin/ls"
	}
	res, err := Resolver{}.Resolve(prog)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Interpreters, []string{loader}) {
		t.Errorf("interpreters %q, want [%s]", res.Interpreters, loader)
	}
	out, err := exec.Command(loader, "--list", prog).Output()
	if err != nil {
		t.Fatalf("%s --list %s: %v", loader, prog, err)
	}
	var want []string
	for _, line := range strings.Split(string(out), "\n") {
		name, _, ok := strings.Cut(strings.TrimSpace(line), " => ")
		if ok {
			want = append(want, name)
		}
	}
	var got []string
	for _, l := range res.Libraries {
		// libc needs the loader by its soname too; --list prints it on a line of its own.
		if path.Base(l) != path.Base(loader) {
			got = append(got, path.Base(l))
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("libraries of %s:\n got %q\nwant %q (from the loader)", prog, got, want)
	}
	for _, l := range res.Libraries {
		if !slices.Contains(SystemDirs, path.Dir(l)) {
			t.Errorf("%s is not in a system directory", l)
		}
	}
}

func TestStaticProgramNeedsNothing(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "static")
	cmd := exec.Command("go", "build", "-o", exe, "./testdata/static")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	res, err := Resolver{}.Resolve(exe)
	if err != nil || len(res.Interpreters) != 0 || len(res.Libraries) != 0 {
		t.Errorf("static program: %+v, %v", res, err)
	}
}

func TestMissingLibraryNamesIt(t *testing.T) {
	_, err := Resolver{Dirs: []string{t.TempDir()}}.Resolve("/bin/ls")
	if err == nil || !strings.Contains(err.Error(), "/bin/ls needs lib") {
		t.Errorf("err = %v, want one naming the missing library", err)
	}
	if _, err := (Resolver{}).Resolve("/etc/passwd"); err == nil {
		t.Error("not an ELF file: no error")
	}
}
