package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/virtpod/virtpod/runner/diskcopy"
	"github.com/virtpod/virtpod/tests/prereq"
)

func TestDiskCommandsHelp(t *testing.T) {
	var code int
	for _, c := range []struct {
		name  string
		want  []string
		build func(*int) *cobra.Command
	}{
		{"disk-target", []string{"--control-dir", "--target stringArray", "drive=<root|disk-NAME>,file=", "size=<bytes>", "base=", "--qemu-nbd-binary", diskcopy.ReadyName, diskcopy.MarkerName, "143"}, diskTargetCommand},
		{"disk-copy", []string{"--copy stringArray", "from=<absolute path>,to=", "--require-marker", diskcopy.PartialSuffix, "64 MiB"}, diskCopyCommand},
	} {
		cmd := c.build(&code)
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs([]string{"--help"})
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s --help lacks %q:\n%s", c.name, w, out.String())
			}
		}
	}
}

// TestDiskCommandsExit: the exit codes and termination messages of refusals and of a copy.
func TestDiskCommandsExit(t *testing.T) {
	dir := t.TempDir()
	msgFile := filepath.Join(dir, "termination-log")
	from := filepath.Join(dir, "vm", "disk.img")
	to := filepath.Join(dir, "snap", "disk.img")
	for _, d := range []string{filepath.Dir(from), filepath.Dir(to)} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(from, bytes.Repeat([]byte{7}, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"disk-target", "--control-dir=" + dir, "--target=drive=Root,file=/a/disk.img,size=512"}, diskcopy.ExitRefused, `--target "drive=Root,file=/a/disk.img,size=512": drive "Root"`},
		{[]string{"disk-target", "--control-dir=" + dir}, diskcopy.ExitRefused, "no --target"},
		{[]string{"disk-target", "--target=drive=root,file=/a/disk.img,size=512"}, diskcopy.ExitRefused, "--control-dir is required"},
		{[]string{"disk-target", "--control-dir=" + dir, "--target=drive=root,file=" + from + ",size=8192"}, diskcopy.ExitRefused, from + " exists already"},
		{[]string{"disk-copy", "--copy=from=" + from + ",to=" + to, "--require-marker"}, diskcopy.ExitRefused, from + " is not a completed snapshot disk"},
		{[]string{"disk-copy", "--copy=from=" + from + ",to=" + to + ",size=16384,drive=disk-data"}, diskcopy.ExitOK, "done"},
		{[]string{"disk-copy", "--copy=from=" + from + ",to=" + to}, diskcopy.ExitRefused, to + " exists already"},
	} {
		if code := execute(append(c.args, "--termination-log="+msgFile)); code != c.code {
			t.Errorf("%q: exit %d, want %d", c.args, code, c.code)
		}
		if b, _ := os.ReadFile(msgFile); !strings.Contains(string(b), c.msg) {
			t.Errorf("%q: termination message %q, want %q", c.args, b, c.msg)
		}
	}
	m, err := diskcopy.ReadMarker(to)
	if fi, _ := os.Stat(to); err != nil || fi.Size() != 16384 || m.Drive != "disk-data" || m.Size != 16384 {
		t.Errorf("the copy: marker %+v, %v", m, err)
	}
}

// TestDiskTargetCommand serves a drive through the command and writes it with qemu-io.
func TestDiskTargetCommand(t *testing.T) {
	_, err := exec.LookPath("qemu-nbd")
	_, ioErr := exec.LookPath("qemu-io")
	prereq.Need(t, err == nil && ioErr == nil, "needs qemu-nbd and qemu-io (qemu-utils): run tools/dev/ci/install-deps.sh")
	control := t.TempDir()
	file := filepath.Join(t.TempDir(), "disk.img")
	done := make(chan int, 1)
	go func() {
		done <- execute([]string{"disk-target", "--control-dir=" + control, "--termination-log=",
			"--target=drive=root,file=" + file + ",size=1048576"})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(control, diskcopy.ReadyName)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not ready after 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	sock := diskcopy.SocketPath(control, "root")
	if out, err := exec.Command("qemu-io", "-f", "raw", "-c", "write -P 0xab 0 64k", "nbd+unix:///root?socket="+sock).CombinedOutput(); err != nil {
		t.Fatalf("qemu-io: %v\n%s", err, out)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("disk-target did not exit after its client disconnected")
	}
	b, _ := os.ReadFile(file)
	if len(b) != 1<<20 || !bytes.Equal(b[:64<<10], bytes.Repeat([]byte{0xab}, 64<<10)) {
		t.Errorf("%s: %d bytes, not the client's data", file, len(b))
	}
	if _, err := diskcopy.ReadMarker(file); err != nil {
		t.Error(err)
	}
}
