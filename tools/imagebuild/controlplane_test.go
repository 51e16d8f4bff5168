package main

import (
	"archive/tar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTenantControlPlaneImage: the four prebuilt programs at their paths in one image, run as
// nonroot with no entrypoint (each container names its command); without one of them, the error
// names its flag and the make target that builds it.
func TestTenantControlPlaneImage(t *testing.T) {
	// Any static binary stands in for the four (the real ones take minutes to build).
	bin := filepath.Join(t.TempDir(), "static")
	cmd := exec.Command("go", "build", "-o", bin, "./pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var args []string
	for _, p := range tenantControlPlaneLayout.programs {
		args = append(args, p.flag+"="+bin)
	}
	img, _ := build(t, append([]string{"tenant-control-plane"}, args...)...)
	cfg := config(t, img)
	if len(cfg.Entrypoint) != 0 || cfg.User != "65532:65532" {
		t.Errorf("entrypoint %q user %q, want none and 65532:65532", cfg.Entrypoint, cfg.User)
	}
	fs := files(t, img)
	for _, p := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"} {
		wantFile(t, fs, "/usr/local/bin/"+p, tar.TypeReg, 0o755, "")
	}
	wantFile(t, fs, "/etc/passwd", tar.TypeReg, 0o644, "")

	c := newRootCommand()
	c.SetArgs(append([]string{"tenant-control-plane", "--out=" + filepath.Join(t.TempDir(), "x.tar")}, args[1:]...))
	c.SilenceErrors, c.SilenceUsage = true, true
	if err := c.Execute(); err == nil || !strings.Contains(err.Error(), "--apiserver-binary is required") || !strings.Contains(err.Error(), "make k8s-binaries") {
		t.Errorf("without --apiserver-binary: %v", err)
	}
}
