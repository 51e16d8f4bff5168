package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/virtpod/virtpod/tests/prereq"
)

// TestCpioReadByBusybox checks the newc writer against an independent reader, busybox cpio.
func TestCpioReadByBusybox(t *testing.T) {
	_, err := os.Stat(busyboxPath)
	prereq.Need(t, err == nil, "busybox not found (install busybox-static: tools/dev/ci/install-deps.sh)")
	var buf bytes.Buffer
	c := &cpioWriter{w: &buf}
	c.Dir("bin")
	c.File("bin/hello", 0o755, []byte("#!/bin/sh\necho hi\n"))
	c.File("odd", 0o644, []byte("x")) // a body that needs padding
	c.Symlink("bin/sh", "busybox")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(busyboxPath, "cpio", "-i", "-d")
	cmd.Dir = dir
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("busybox cpio: %v %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "bin", "hello"))
	if err != nil || string(b) != "#!/bin/sh\necho hi\n" {
		t.Fatalf("bin/hello = %q, %v", b, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "bin", "hello")); fi.Mode().Perm() != 0o755 {
		t.Errorf("bin/hello mode %v", fi.Mode())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "odd")); string(b) != "x" {
		t.Errorf("odd = %q", b)
	}
	if target, err := os.Readlink(filepath.Join(dir, "bin", "sh")); err != nil || target != "busybox" {
		t.Errorf("bin/sh -> %q, %v", target, err)
	}
}
