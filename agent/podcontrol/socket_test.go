package podcontrol

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// serve listens on path and counts the connections it takes.
func serve(t *testing.T, path string) chan struct{} {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	got := make(chan struct{}, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			got <- struct{}{}
			_, _ = io.WriteString(c, "hello")
			c.Close()
		}
	}()
	return got
}

func controlRoot(t *testing.T, devices ...string) string {
	t.Helper()
	root, err := os.MkdirTemp("", "pc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	for _, d := range devices {
		if err := os.Mkdir(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestDialRefusesLinks: a pod's runner.sock that is a symlink to another pod's (relative or
// absolute), a directory that is one, or a plain file is refused and the other pod's socket
// never sees a connection; the pod's own socket is reached.
func TestDialRefusesLinks(t *testing.T) {
	root := controlRoot(t, "victim", "attacker", "own")
	victim := serve(t, filepath.Join(root, "victim", "runner.sock"))
	own := serve(t, filepath.Join(root, "own", "runner.sock"))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("../victim/runner.sock", filepath.Join(root, "attacker", "runner.sock")))
	must(os.Symlink(filepath.Join(root, "victim", "runner.sock"), filepath.Join(root, "attacker", "abs.sock")))
	must(os.WriteFile(filepath.Join(root, "attacker", "file.sock"), nil, 0o600))
	must(os.Symlink(filepath.Join(root, "victim"), filepath.Join(root, "linked")))
	ctx := context.Background()
	for _, c := range []struct {
		ctl  Control
		name string
		want string
	}{
		{Control{root, "attacker"}, "runner.sock", "attacker/runner.sock is or passes through a symlink"},
		{Control{root, "attacker"}, "abs.sock", "attacker/abs.sock is or passes through a symlink"},
		{Control{root, "attacker"}, "../victim/runner.sock", "symlink"},
		{Control{root, "attacker"}, "file.sock", "not a socket"},
		{Control{root, "linked"}, "runner.sock", "linked is or passes through a symlink"},
		{Control{root, "../" + filepath.Base(root) + "/victim"}, "runner.sock", "symlink"},
	} {
		conn, err := c.ctl.Dial(ctx, c.name)
		if err == nil {
			conn.Close()
			t.Errorf("%s/%s: dialled, want refused", c.ctl, c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s/%s: %v, want %q", c.ctl, c.name, err, c.want)
		}
	}
	if len(victim) != 0 {
		t.Fatalf("the victim's socket took %d connections", len(victim))
	}
	conn, err := Control{root, "own"}.Dial(ctx, "runner.sock")
	must(err)
	b, _ := io.ReadAll(conn)
	conn.Close()
	if string(b) != "hello" || len(own) != 1 {
		t.Fatalf("own socket: read %q, %d connections", b, len(own))
	}
}

// TestListenRefusesLinks: the agent's socket replaces a stale socket, is mode 0600, and goes
// with Close; a symlink or file planted under its name is refused and its target untouched.
func TestListenRefusesLinks(t *testing.T) {
	root := controlRoot(t, "pod", "other")
	ctl := Control{root, "pod"}
	elsewhere := filepath.Join(root, "other", "precious")
	if err := os.WriteFile(elsewhere, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(root, "pod", "migrate-out.sock")
	for _, plant := range []func() error{
		func() error { return os.Symlink(elsewhere, sock) },
		func() error { return os.Symlink("../other/precious", sock) },
		func() error { return os.WriteFile(sock, nil, 0o644) },
	} {
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		if l, err := ctl.Listen("migrate-out.sock"); err == nil {
			l.Close()
			t.Errorf("listened over a planted %s", sock)
		} else if !strings.Contains(err.Error(), "refused") {
			t.Errorf("planted: %v", err)
		}
		os.Remove(sock)
	}
	if fi, err := os.Stat(elsewhere); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("the link's target changed: %v %v", fi, err)
	}
	// A stale socket is replaced.
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	l, err := ctl.Listen("migrate-out.sock")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the agent's socket: %v %v", fi, err)
	}
	// The runner's user's alone: its QEMU connects, nobody else.
	if st := fi.Sys().(*syscall.Stat_t); int64(st.Uid) != vmv1.RunnerUID || int64(st.Gid) != vmv1.RunnerGID {
		t.Fatalf("the agent's socket is %d:%d, want the runner's %d:%d", st.Uid, st.Gid, vmv1.RunnerUID, vmv1.RunnerGID)
	}
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := ctl.Dial(context.Background(), "migrate-out.sock")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	l.Close()
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Fatalf("the socket outlived its listener: %v", err)
	}
}
