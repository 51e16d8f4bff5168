package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner/diskcopy"
)

func TestDiskServeHelp(t *testing.T) {
	var code int
	cmd := diskServeCommand(&code)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"--control-dir", "--disk string", "--state-dir", "--qemu-nbd-binary", controlapi.AttachmentSocket, "persistent"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("disk-serve --help lacks %q:\n%s", w, out.String())
		}
	}
}

// TestDiskServeRefuses: the exit code and termination message of refused flags.
func TestDiskServeRefuses(t *testing.T) {
	dir := t.TempDir()
	msgFile := filepath.Join(dir, "termination-log")
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--control-dir=" + dir}, "--disk is required"},
		{[]string{"--control-dir=" + dir, "--disk=name=data,kind=file,path=/d,evil=1"}, `"evil=1" is not`},
		{[]string{"--control-dir=" + dir, "--disk=name=data,kind=file,path=/d/../../etc"}, "want a clean absolute path"},
		{[]string{"--disk=name=data,kind=file,path=/d"}, "--control-dir"},
	} {
		args := append([]string{"disk-serve", "--termination-log=" + msgFile, "--qemu-nbd-binary=/nonexistent"}, c.args...)
		if code := execute(args); code != diskcopy.ExitRefused {
			t.Errorf("%q: exit %d, want %d", c.args, code, diskcopy.ExitRefused)
		}
		if b, _ := os.ReadFile(msgFile); !strings.Contains(string(b), c.msg) {
			t.Errorf("%q: termination message %q, want %q", c.args, b, c.msg)
		}
	}
}
