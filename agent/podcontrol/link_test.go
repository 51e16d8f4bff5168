package podcontrol

import (
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// reaches says whether a connection to path gets the server's hello.
func reaches(t *testing.T, path string, got chan struct{}) bool {
	t.Helper()
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		t.Logf("dial %s: %v", path, err)
		return false
	}
	defer c.Close()
	b, _ := io.ReadAll(c)
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		return false
	}
	return string(b) == "hello"
}

// entries are the names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestLinkSocket: a linked socket reaches the server; linking again changes nothing; whatever
// the runner planted where the link goes (a file, a symlink to another pod's socket) is
// replaced, not followed; Remove takes the link away.
func TestLinkSocket(t *testing.T) {
	root := controlRoot(t, "att", "run", "victim")
	got := serve(t, filepath.Join(root, "att", "disk.sock"))
	victim := serve(t, filepath.Join(root, "victim", "runner.sock"))
	att, run := Control{root, "att"}, Control{root, "run"}
	link := filepath.Join(root, "run", "hotplug-data.sock")
	for i := range 2 {
		if err := att.LinkSocket("disk.sock", run, "hotplug-data.sock"); err != nil {
			t.Fatalf("link %d: %v", i, err)
		}
		if !reaches(t, link, got) {
			t.Fatalf("link %d does not reach the attachment's server", i)
		}
		if names := entries(t, filepath.Join(root, "run")); len(names) != 1 {
			t.Errorf("the runner's directory holds %v, want the link alone", names)
		}
	}

	if err := os.WriteFile(filepath.Join(root, "run", "hotplug-file.sock"), []byte("planted"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../victim/runner.sock", filepath.Join(root, "run", "hotplug-sym.sock")); err != nil {
		t.Fatal(err)
	}
	for _, as := range []string{"hotplug-file.sock", "hotplug-sym.sock"} {
		if err := att.LinkSocket("disk.sock", run, as); err != nil {
			t.Fatalf("over %s: %v", as, err)
		}
		fi, err := os.Lstat(filepath.Join(root, "run", as))
		if err != nil || fi.Mode().Type() != os.ModeSocket {
			t.Errorf("%s: %v, %v; want the socket", as, fi, err)
		}
		if !reaches(t, filepath.Join(root, "run", as), got) {
			t.Errorf("%s does not reach the attachment's server", as)
		}
	}
	if fi, err := os.Lstat(filepath.Join(root, "victim", "runner.sock")); err != nil || fi.Mode().Type() != os.ModeSocket || len(victim) != 0 {
		t.Errorf("the victim's socket was touched: %v, %v, %d connections", fi, err, len(victim))
	}

	for range 2 {
		if err := run.Remove("hotplug-data.sock"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Lstat(link); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link is still there: %v", err)
	}
	if !reaches(t, filepath.Join(root, "att", "disk.sock"), got) {
		t.Error("removing the link took the attachment's socket")
	}
}

// TestLinkSocketRefuses: a source that is a symlink (to another pod's socket) or not a
// socket, names that are paths, and a destination directory that is a symlink are refused, and
// nothing is made; Remove refuses what is not a socket and leaves it.
func TestLinkSocketRefuses(t *testing.T) {
	root := controlRoot(t, "att", "run", "victim")
	serve(t, filepath.Join(root, "att", "disk.sock"))
	victim := serve(t, filepath.Join(root, "victim", "runner.sock"))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("../victim/runner.sock", filepath.Join(root, "att", "sym.sock")))
	must(os.WriteFile(filepath.Join(root, "att", "file.sock"), nil, 0o600))
	must(os.Symlink(filepath.Join(root, "victim"), filepath.Join(root, "linked")))
	att, run := Control{root, "att"}, Control{root, "run"}
	for _, c := range []struct {
		name string
		dst  Control
		as   string
		want string
	}{
		{"sym.sock", run, "hotplug-a.sock", "symlink"},
		{"file.sock", run, "hotplug-a.sock", "not a socket"},
		{"../victim/runner.sock", run, "hotplug-a.sock", "not a path"},
		{"disk.sock", run, "../victim/runner.sock", "not a path"},
		{"disk.sock", run, "..", "not a path"},
		{"disk.sock", Control{root, "linked"}, "hotplug-a.sock", "symlink"},
	} {
		err := att.LinkSocket(c.name, c.dst, c.as)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("LinkSocket(%s, %s, %s) = %v, want %q", c.name, c.dst, c.as, err, c.want)
		}
	}
	if names := entries(t, filepath.Join(root, "run")); len(names) != 0 {
		t.Errorf("the runner's directory holds %v after refusals", names)
	}
	if names := entries(t, filepath.Join(root, "victim")); len(names) != 1 || len(victim) != 0 {
		t.Errorf("the victim's directory holds %v, %d connections", names, len(victim))
	}
	for _, name := range []string{"sym.sock", "file.sock"} {
		if err := att.Remove(name); !errors.Is(err, ErrRefused) {
			t.Errorf("Remove(%s) = %v, want a refusal", name, err)
		}
		if _, err := os.Lstat(filepath.Join(root, "att", name)); err != nil {
			t.Errorf("%s was removed: %v", name, err)
		}
	}
}

// envLinkHelper runs TestLinkSocketWithoutFowner's body in a process without CAP_FOWNER.
const envLinkHelper = "VIRTPOD_LINK_HELPER"

// TestLinkSocketWithoutFowner: with the agent's capabilities alone (no CAP_FOWNER), the
// kernel's fs.protected_hardlinks lets no one but a socket's owner link it; the link is made
// all the same, and the socket is the runner's user's after.
func TestLinkSocketWithoutFowner(t *testing.T) {
	if os.Getenv(envLinkHelper) == "" {
		setpriv, err := exec.LookPath("setpriv")
		if os.Geteuid() != 0 || err != nil {
			t.Skip("needs root and setpriv to run without CAP_FOWNER")
		}
		// The agent's capabilities and no other (config/agent/daemonset.yaml).
		caps := "-all,+sys_admin,+net_admin,+net_raw,+mknod,+dac_override,+chown"
		cmd := exec.Command(setpriv, "--bounding-set="+caps, "--inh-caps=-all", "--", os.Args[0], "-test.run=^TestLinkSocketWithoutFowner$", "-test.v")
		cmd.Env = append(os.Environ(), envLinkHelper+"=1")
		out, err := cmd.CombinedOutput()
		switch {
		case err == nil && strings.Contains(string(out), "--- SKIP"):
			t.Skipf("without CAP_FOWNER: %s", out)
		case err != nil || !strings.Contains(string(out), "--- PASS"):
			t.Fatalf("without CAP_FOWNER: %v\n%s", err, out)
		}
		return
	}
	root := controlRoot(t, "att", "run")
	got := serve(t, filepath.Join(root, "att", "disk.sock"))
	sock := filepath.Join(root, "att", "disk.sock")
	if err := os.Chown(sock, int(vmv1.RunnerUID), int(vmv1.RunnerGID)); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(sock, filepath.Join(root, "run", "probe")); !errors.Is(err, syscall.EPERM) {
		t.Skipf("a plain link of another user's socket did not fail with EPERM (%v): protected_hardlinks is off", err)
	}
	if err := (Control{root, "att"}).LinkSocket("disk.sock", Control{root, "run"}, "hotplug-a.sock"); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "run", "hotplug-a.sock")
	if !reaches(t, link, got) {
		t.Fatal("the link does not reach the server")
	}
	fi, err := os.Lstat(link)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int64(st.Uid) != vmv1.RunnerUID || int64(st.Gid) != vmv1.RunnerGID {
		t.Errorf("the socket is %d:%d, want the runner's %d:%d", st.Uid, st.Gid, vmv1.RunnerUID, vmv1.RunnerGID)
	}
}
