package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/virtpod/virtpod/tests/prereq"
)

// build runs imagebuild with args plus --out into a temp file and reads the archive back.
func build(t *testing.T, args ...string) (v1.Image, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "image.tar")
	cmd := newRootCommand()
	cmd.SetArgs(append(args, "--out="+out))
	if err := cmd.Execute(); err != nil {
		t.Fatalf("imagebuild %s: %v", strings.Join(args, " "), err)
	}
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatalf("read back %s: %v", out, err)
	}
	return img, out
}

// files is the image's flattened file system: path (with a leading /) to tar header.
func files(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	m := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return m
		}
		if err != nil {
			t.Fatal(err)
		}
		m["/"+strings.TrimSuffix(h.Name, "/")] = h
	}
}

// extract unpacks the image's file system into a new directory, as a container runtime would.
func extract(t *testing.T, img v1.Image) string {
	t.Helper()
	return extractTo(t, img, t.TempDir())
}

// extractTo unpacks the image's file system into root.
func extractTo(t *testing.T, img v1.Image, root string) string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return root
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, root+string(filepath.Separator)) {
			t.Fatalf("entry %q leaves the root", h.Name)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
			if err == nil {
				err = os.Chmod(p, h.FileInfo().Mode())
			}
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, h.FileInfo().Mode().Perm()); err == nil {
				_, err = io.Copy(f, tr)
				f.Close()
			}
		default:
			t.Fatalf("entry %q has unexpected type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// within resolves p inside root, following symlinks (absolute ones relative to root), so a
// check never escapes to the host's files.
func within(t *testing.T, root, p string) string {
	t.Helper()
	for range 40 {
		parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
		cur, relinked := "/", false
		for i, part := range parts {
			next := filepath.Join(cur, part)
			target, err := os.Readlink(filepath.Join(root, next))
			if err != nil {
				cur = next
				continue
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			p, relinked = filepath.Join(append([]string{target}, parts[i+1:]...)...), true
			break
		}
		if !relinked {
			return filepath.Join(root, cur)
		}
	}
	t.Fatalf("%s: too many symlinks in %s", p, root)
	return ""
}

// needTool skips when a host prerequisite is missing, and fails under CI=true.
func needTool(t *testing.T, what, fix string, ok bool) {
	t.Helper()
	prereq.Need(t, ok, what+": "+fix)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func haveCommands(names ...string) bool {
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			return false
		}
	}
	return true
}

// inContainer runs argv chrooted into root, in a private mount namespace with the host's /dev and
// a fresh /proc and read-only /sys mounted inside, like a container runtime gives a container.
// The mounts go away with the process. Needs root, unshare (util-linux) and chroot.
func inContainer(t *testing.T, root string, argv ...string) *exec.Cmd {
	t.Helper()
	needTool(t, "running the image's programs chrooted", "run the test as root", os.Geteuid() == 0)
	needTool(t, "unshare, mount and chroot", "install util-linux and coreutils", haveCommands("unshare", "mount", "chroot"))
	for _, d := range []string{"dev", "proc", "sys"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := `mount --rbind /dev "$0/dev" && mount -t proc proc "$0/proc" && mount --rbind -o ro /sys "$0/sys" && exec chroot "$0" "$@"`
	// No --fork: sh execs chroot, which execs argv, so signals reach the program itself.
	return exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, root}, argv...)...)
}
