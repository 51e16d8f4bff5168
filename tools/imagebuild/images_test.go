package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/virtpod/virtpod/pkg/image/vmimage"
	"github.com/virtpod/virtpod/tests/prereq"
)

// wantFile fails unless path is in fs with the given type and permissions (and, for a symlink,
// target).
func wantFile(t *testing.T, fs map[string]*tar.Header, path string, typ byte, mode int64, target string) {
	t.Helper()
	h, ok := fs[path]
	if !ok {
		t.Errorf("%s missing from the image", path)
		return
	}
	if h.Typeflag != typ || typ != tar.TypeSymlink && h.Mode != mode || h.Linkname != target {
		t.Errorf("%s: type %c mode %o link %q; want type %c mode %o link %q", path, h.Typeflag, h.Mode, h.Linkname, typ, mode, target)
	}
	if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(0, 0)) {
		t.Errorf("%s: owner %d:%d, mtime %v; want 0:0 at the epoch", path, h.Uid, h.Gid, h.ModTime)
	}
}

func config(t *testing.T, img v1.Image) v1.Config {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cf.OS, cf.Architecture)
	}
	return cf.Config
}

func TestControllerImage(t *testing.T) {
	img, _ := build(t, "controller")
	cfg := config(t, img)
	if !slices.Equal(cfg.Entrypoint, []string{"/usr/local/bin/virtpod-controller"}) || cfg.User != "65532:65532" {
		t.Errorf("entrypoint %q user %q", cfg.Entrypoint, cfg.User)
	}
	fs := files(t, img)
	wantFile(t, fs, "/usr/local/bin/virtpod-controller", tar.TypeReg, 0o755, "")
	wantFile(t, fs, "/etc/passwd", tar.TypeReg, 0o644, "")
	wantFile(t, fs, "/etc/group", tar.TypeReg, 0o644, "")
	wantFile(t, fs, "/tmp", tar.TypeDir, 0o1777, "")
	root := extract(t, img)
	if b, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); !bytes.Contains(b, []byte(":65532:65532:")) {
		t.Errorf("/etc/passwd has no user 65532:\n%s", b)
	}
	out, err := exec.Command(filepath.Join(root, "usr/local/bin/virtpod-controller"), "--help").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("-runner-image")) {
		t.Errorf("the packaged controller does not run: %v\n%s", err, out)
	}
}

func TestPauseImage(t *testing.T) {
	img, _ := build(t, "pause")
	cfg := config(t, img)
	if !slices.Equal(cfg.Entrypoint, []string{"/pause"}) || cfg.User != "65535:65535" {
		t.Errorf("entrypoint %q user %q", cfg.Entrypoint, cfg.User)
	}
	fs := files(t, img)
	wantFile(t, fs, "/pause", tar.TypeReg, 0o755, "")
	if len(fs) != 1 {
		t.Errorf("pause image holds %d entries, want only /pause", len(fs))
	}
	// It must wait, then exit 0 on SIGTERM.
	cmd := exec.Command(filepath.Join(extract(t, img), "pause"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("pause exited before any signal: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("pause after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("pause ignored SIGTERM")
	}
}

func TestToolboxImage(t *testing.T) {
	needTool(t, "/bin/busybox", "install busybox-static (tools/dev/ci/install-deps.sh)", fileExists("/bin/busybox"))
	img, _ := build(t, "toolbox")
	cfg := config(t, img)
	if len(cfg.Entrypoint) != 0 || !slices.Equal(cfg.Cmd, []string{"sh"}) {
		t.Errorf("entrypoint %q cmd %q, want none and [sh]", cfg.Entrypoint, cfg.Cmd)
	}
	fs := files(t, img)
	wantFile(t, fs, "/bin/busybox", tar.TypeReg, 0o755, "")
	for _, a := range []string{"sh", "wget", "nc", "sleep", "cat", "ip", "nslookup"} {
		wantFile(t, fs, "/bin/"+a, tar.TypeSymlink, 0, "busybox")
	}
	wantFile(t, fs, "/bin/sshcheck", tar.TypeReg, 0o755, "")
	root := extract(t, img)
	out, err := exec.Command(filepath.Join(root, "bin/sh"), "-c", "echo toolbox works").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "toolbox works" {
		t.Errorf("the packaged sh: %v %q", err, out)
	}
	// The packaged SSH client runs (static) and refuses a call without its arguments.
	out, err = exec.Command(filepath.Join(root, "bin/sshcheck")).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "usage: sshcheck") {
		t.Errorf("the packaged sshcheck without arguments: %v %q, want exit 2 and its usage", err, out)
	}
}

func TestToolboxRejectsDynamicBusybox(t *testing.T) {
	cmd := newRootCommand()
	cmd.SetArgs([]string{"toolbox", "--busybox=/bin/ls", "--out=" + filepath.Join(t.TempDir(), "x.tar")})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "--busybox") || !strings.Contains(err.Error(), "busybox-static") {
		t.Fatalf("err = %v, want one naming --busybox and busybox-static", err)
	}
}

// TestImagesAreReproducible: the same inputs give the same image, so rebuilding changes nothing
// in containerd.
func TestImagesAreReproducible(t *testing.T) {
	needTool(t, "/bin/busybox", "install busybox-static (tools/dev/ci/install-deps.sh)", fileExists("/bin/busybox"))
	a, _ := build(t, "toolbox")
	b, _ := build(t, "toolbox")
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("two builds differ: %s and %s", da, db)
	}
}

func TestVMImage(t *testing.T) {
	guest := os.Getenv("VIRTPOD_GUEST")
	if guest == "" {
		guest = filepath.Join(prereq.Cache(), "guest")
	}
	needTool(t, "guest fixture in "+guest, "run make guest-fixture", fileExists(filepath.Join(guest, "disk", "root.img")))
	img, _ := build(t, "vm", "--tag=localhost/virtpod/guest:test",
		"--kernel="+filepath.Join(guest, "boot", "vmlinuz"),
		"--initrd="+filepath.Join(guest, "boot", "initrd.img"),
		"--disk="+filepath.Join(guest, "disk", "root.img"))
	cfg := config(t, img)
	if len(cfg.Entrypoint) != 0 || len(cfg.Cmd) != 0 {
		t.Errorf("a VM image runs nothing; entrypoint %q cmd %q", cfg.Entrypoint, cfg.Cmd)
	}
	fs := files(t, img)
	for _, p := range []string{vmimage.KernelPath, vmimage.InitrdPath, vmimage.DiskPath} {
		wantFile(t, fs, p, tar.TypeReg, 0o644, "")
	}
	wantFile(t, fs, vmimage.CopierPath, tar.TypeReg, 0o755, "")
	// The Debian bzImage is stored as the PVH vmlinux inside it, several times its size.
	if bz, _ := os.Stat(filepath.Join(guest, "boot", "vmlinuz")); bz == nil || fs[vmimage.KernelPath].Size < 2*bz.Size() {
		t.Errorf("kernel is %d bytes: want the bzImage unpacked", fs[vmimage.KernelPath].Size)
	}
	if want, _ := os.Stat(filepath.Join(guest, "disk", "root.img")); fs[vmimage.DiskPath].Size != want.Size() {
		t.Errorf("disk is %d bytes, want %d", fs[vmimage.DiskPath].Size, want.Size())
	}
	if layers, _ := img.Layers(); len(layers) != 3 {
		t.Errorf("%d layers, want 3 (copy program, kernel+initrd, disk)", len(layers))
	}
}

func TestVMImageFlagErrors(t *testing.T) {
	notKernel := filepath.Join(t.TempDir(), "vmlinuz")
	if err := os.WriteFile(notKernel, []byte("not a kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no --kernel and no root disk"},
		{[]string{"--rootfs=/tmp"}, "--rootfs and --rootfs-tar need --disk-size"},
		{[]string{"--rootfs=/tmp", "--disk-size=lots"}, "--disk-size=lots: want a size such as 2Gi"},
		{[]string{"--rootfs=/tmp", "--disk-size=-1Gi"}, "--disk-size=-1Gi: want a size"},
		{[]string{"--rootfs-tar=/nonexistent.tar", "--disk-size=1Gi"}, "--rootfs-tar: open /nonexistent.tar"},
		{[]string{"--disk=/dev/null", "--vmcopy-binary=/bin/ls"}, "--vmcopy-binary: /bin/ls is dynamically linked"},
		{[]string{"--initrd=/etc/hostname", "--disk=/dev/null"}, "--initrd without --kernel"},
		{[]string{"--kernel=" + notKernel}, "--kernel: " + notKernel + " is neither"},
		{[]string{"--kernel=/nonexistent/vmlinuz"}, "--kernel: open /nonexistent/vmlinuz"},
		{[]string{"--disk=/etc/hostname", "--disk-name=disk.vmdk"}, "--disk-name=disk.vmdk: want root.img or a file name ending .qcow2, .img or .raw"},
	} {
		cmd := newRootCommand()
		cmd.SetArgs(append([]string{"vm", "--out=" + filepath.Join(t.TempDir(), "x.tar")}, tc.args...))
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("vm %q: err = %v, want %q", tc.args, err, tc.want)
		}
	}
	cmd := newRootCommand()
	cmd.SetArgs([]string{"vm", "--disk=/dev/null"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--out is required") {
		t.Errorf("without --out: %v", err)
	}
}

func TestImportFlagsAreCheckedFirst(t *testing.T) {
	cmd := newRootCommand()
	cmd.SetArgs([]string{"pause", "--out=" + filepath.Join(t.TempDir(), "x.tar"), "--import", "--ctr=/nonexistent/ctr"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--ctr: /nonexistent/ctr not found") {
		t.Errorf("err = %v", err)
	}
	cmd = newRootCommand()
	cmd.SetArgs([]string{"pause", "--out=" + filepath.Join(t.TempDir(), "x.tar"), "--import", "--ctr=/bin/true", "--containerd-address=/nonexistent.sock"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--containerd-address: /nonexistent.sock is not a socket") {
		t.Errorf("err = %v", err)
	}
}
