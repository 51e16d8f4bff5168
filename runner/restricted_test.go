package runner_test

// The runner as a runner pod runs it at Pod Security restricted: its user, no capability, what
// it is handed readable, /dev/net/tun its own; and this test process in the node agent's part
// (podnetwork.Handle), which plumbs the namespace standing in for the pod's.

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/kernel/kernelcache"
	"github.com/virtpod/virtpod/pkg/network/guestnet"
	"github.com/virtpod/virtpod/pkg/network/podnetwork"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// dropPrivileges is the runner's setpriv: no capability in any set, none to gain by exec, and
// as a pod's runner the runner's user and group with no other group.
func dropPrivileges(asRunner bool) []string {
	p := []string{"setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--no-new-privs"}
	if asRunner {
		p = append(p, fmt.Sprintf("--reuid=%d", vmv1.RunnerUID), fmt.Sprintf("--regid=%d", vmv1.RunnerGID), "--clear-groups")
	}
	return append(p, "--")
}

// tunOwnedByRunner is a wrap that gives its command /dev/net/tun as the runner container has it:
// the runtime hands devices to a non-root container owned by its user
// (device_ownership_from_security_context, docs/security.md), here a node of the runner's user
// bind-mounted over the host's in a mount namespace of its own.
func tunOwnedByRunner(t testing.TB) []string {
	t.Helper()
	reachable(t, nil) // makes shareDir
	tun := filepath.Join(shareDir, "tun")
	if _, err := os.Stat(tun); err != nil {
		if err := unix.Mknod(tun, unix.S_IFCHR|0o600, int(unix.Mkdev(10, 200))); err != nil && !os.IsExist(err) {
			t.Fatalf("a tun device node for the runner's user: %v", err)
		}
		if err := os.Chown(tun, int(vmv1.RunnerUID), int(vmv1.RunnerGID)); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", `mount --bind "$0" /dev/net/tun && exec "$@"`, tun}
}

// runnerDir is a directory of the runner's user for its state, control socket and termination
// log, as the pod's emptyDir and control directory are.
func runnerDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "virtpod-runner-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, int(vmv1.RunnerUID), int(vmv1.RunnerGID)); err != nil {
		t.Fatal(err)
	}
	return dir
}

var (
	shareOnce sync.Once
	shareDir  string
)

// reachable gives the runner's user what the test hands it: each absolute path that exists in
// a --flag=value argument (the guest fixture in root's cache, a resolv.conf in a temporary
// directory) is linked into a directory everyone may read, its files made readable, and the
// argument rewritten; as a pod's image and ConfigMap volumes are readable by the runner.
func reachable(t testing.TB, args []string) []string {
	t.Helper()
	shareOnce.Do(func() {
		if shareDir, _ = os.MkdirTemp("", "virtpod-runner-share-"); shareDir != "" {
			_ = os.Chmod(shareDir, 0o755)
		}
	})
	out := append([]string(nil), args...)
	for i, a := range out {
		k, v, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(k, "--") || !filepath.IsAbs(v) {
			continue
		}
		if _, err := os.Stat(v); err != nil {
			continue
		}
		dst := filepath.Join(shareDir, fmt.Sprintf("%x", sha256.Sum256([]byte(v)))[:16], filepath.Base(v))
		if err := linkTree(v, dst); err != nil {
			t.Fatalf("making %s readable for the runner's user: %v", v, err)
		}
		out[i] = k + "=" + dst
	}
	return out
}

// linkTree hard-links src (a file, or a directory's files) at dst, directories 0755 and files
// readable by all.
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if err := os.Link(p, to); err != nil && !os.IsExist(err) {
			return err
		}
		st, err := os.Stat(to)
		if err != nil {
			return err
		}
		return os.Chmod(to, st.Mode().Perm()|0o044)
	})
}

// agentRequest is what the node agent would read from the runner pod's arguments.
func agentRequest(t testing.TB, args []string) (podnetwork.Request, bool) {
	req := podnetwork.Request{Mode: vmv1.NetworkPod, Interface: "eth0",
		Owner: guestnet.TapOwner{UID: uint32(vmv1.RunnerUID), GID: uint32(vmv1.RunnerGID)}}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "--network":
			mode, err := vmv1.ParseNetworkFlag(v)
			if err != nil {
				t.Fatal(err)
			}
			req.Mode = mode
		case "--name":
			req.VMName = v
		case "--port":
			p, err := runnerconfig.ParsePort(v)
			if err != nil {
				t.Fatal(err)
			}
			req.Ports = append(req.Ports, p)
		}
	}
	return req, req.Mode != vmv1.NetworkNone
}

var (
	kernelsOnce sync.Once
	kernels     podnetwork.Kernels
	// kernelsOff has the test's agent unpack no kernels, as an agent that refuses one: its
	// runners boot their bzImage themselves (no runner test runs in parallel).
	kernelsOff atomic.Bool
)

// testKernels is the node agent's store of unpacked kernels (pkg/kernel/kernelcache), one for every
// runner of the test binary as one agent serves a node's runners, in shareDir (made by
// reachable, removed by TestMain). nil if it cannot be made: the runner then boots its bzImage.
func testKernels() podnetwork.Kernels {
	if kernelsOff.Load() {
		return nil
	}
	kernelsOnce.Do(func() {
		if shareDir == "" {
			return
		}
		if c, err := kernelcache.New(filepath.Join(shareDir, "kernels"), 0, 0); err == nil {
			kernels = c
		}
	})
	return kernels
}

// runAgent does for the runner what the node agent does for a runner pod: it connects to the
// runner's netns.sock once it is there, plumbs the namespace handed over and unpacks the
// bzImage handed with it (podnetwork.Handle, testKernels).
func (r *runnerProc) runAgent(req podnetwork.Request) {
	sock := filepath.Join(filepath.Dir(r.control), vmv1.NetnsSocketName)
	for {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Net: "unix", Name: sock})
		if err == nil {
			ns, _, err := podnetwork.Handle(c, req, testKernels())
			c.Close()
			if err != nil {
				r.agentErr.Store(&err)
				return
			}
			r.ns.Store(ns)
			return
		}
		select {
		case <-r.exited:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// agentAgain is a restarted node agent's handoff: whether it built anything.
func (r *runnerProc) agentAgain(t testing.TB) (bool, error) {
	t.Helper()
	sock := filepath.Join(filepath.Dir(r.control), vmv1.NetnsSocketName)
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Net: "unix", Name: sock})
	if err != nil {
		return false, err
	}
	defer c.Close()
	req, _ := agentRequest(t, nil)
	ns, built, err := podnetwork.Handle(c, req, testKernels())
	if ns != nil {
		ns.Close()
	}
	return built, err
}

// netns is the pod namespace the test's agent plumbed, once it has.
func (r *runnerProc) netns() *os.File {
	for range 100 {
		if ns := r.ns.Load(); ns != nil {
			return ns
		}
		time.Sleep(50 * time.Millisecond)
	}
	panic("the test's node agent never plumbed the runner's namespace")
}
