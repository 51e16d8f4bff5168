package runner_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/guestnet"
	"github.com/virtpod/virtpod/pkg/podnetwork"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/tests/bootcount"
	"github.com/virtpod/virtpod/tests/prereq"
	"golang.org/x/sys/unix"
)

const marker = "VIRTPOD-GUEST-READY"

// need skips a test whose host requirements are missing, and fails it instead under CI=true,
// where a skip would hide that the suite did not run.
func need(t testing.TB, ok bool, why string) {
	t.Helper()
	prereq.Need(t, ok, why+"; run tools/dev/ci/install-deps.sh and make guest-fixture")
}

func haveBinary(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// guestFixture is the directory `make guest-fixture` builds.
func guestFixture(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("VIRTPOD_GUEST")
	if dir == "" {
		dir = filepath.Join(prereq.Cache(), "guest")
	}
	_, err := os.Stat(filepath.Join(dir, "fixture.json"))
	need(t, err == nil, "no guest fixture in "+dir+": run make guest-fixture")
	return dir
}

// needGuestHost checks what booting a guest needs.
func needGuestHost(t testing.TB) string {
	t.Helper()
	need(t, os.Geteuid() == 0, "needs root (network namespaces, bridge and tap)")
	need(t, haveBinary("qemu-system-x86_64") && haveBinary("qemu-img"), "needs qemu-system-x86 and qemu-utils")
	need(t, haveBinary("ip"), "needs iproute2")
	return guestFixture(t)
}

// TestMain removes the runner binary the tests built and records the guests they booted.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := bootcount.Write("runner"); err != nil {
		fmt.Fprintln(os.Stderr, "boot count:", err)
		code = 1
	}
	if runnerBin != "" {
		_ = os.RemoveAll(filepath.Dir(runnerBin))
	}
	if shareDir != "" {
		_ = os.RemoveAll(shareDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	runnerBin string
	buildErr  error
)

// runnerBinary builds the runner once per test binary.
func runnerBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "virtpod-runner-")
		if err != nil {
			buildErr = err
			return
		}
		_ = os.Chmod(dir, 0o755) // the runner's user runs it too
		runnerBin = filepath.Join(dir, "runner")
		args := []string{"build", "-o", runnerBin}
		if os.Getenv("VIRTPOD_TEST_RACE") == "1" {
			args = append(args, "-race") // the runner binary itself under the race detector
		}
		out, err := exec.Command("go", append(args, "github.com/virtpod/virtpod/runner/cmd/virtpod-runner")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return runnerBin
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// podNetns stands in for a pod's network namespace: eth0 inside, 10.213.<n>.2/24, default
// route to the host end of a veth pair at 10.213.<n>.1.
type podNetns struct {
	name, hostIf string
	podIP, gwIP  string
	podMAC       string // eth0's MAC before the runner starts
	resolvConf   string
}

func newPodNetns(t *testing.T, n int) *podNetns {
	t.Helper()
	p := &podNetns{
		name:   fmt.Sprintf("vpt-%d-%d", os.Getpid(), n),
		hostIf: fmt.Sprintf("vpt%dh%d", n, os.Getpid()%10000),
		podIP:  fmt.Sprintf("10.213.%d.2", n),
		gwIP:   fmt.Sprintf("10.213.%d.1", n),
	}
	run(t, "ip", "netns", "add", p.name)
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", p.name).Run()
		_ = exec.Command("ip", "link", "del", p.hostIf).Run()
	})
	run(t, "ip", "link", "add", p.hostIf, "type", "veth", "peer", "name", "eth0", "netns", p.name)
	run(t, "ip", "addr", "add", p.gwIP+"/24", "dev", p.hostIf)
	run(t, "ip", "link", "set", p.hostIf, "up")
	run(t, "ip", "-n", p.name, "addr", "add", p.podIP+"/24", "dev", "eth0")
	run(t, "ip", "-n", p.name, "link", "set", "eth0", "up")
	run(t, "ip", "-n", p.name, "link", "set", "lo", "up")
	// As the runner pod sets it (a safe sysctl): the runner's user may serve DHCP on port 67
	// and relay the guest's low ports.
	run(t, "ip", "netns", "exec", p.name, "sysctl", "-q", "-w", "net.ipv4.ip_unprivileged_port_start=0")
	run(t, "ip", "-n", p.name, "route", "add", "default", "via", p.gwIP)
	var links []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal([]byte(run(t, "ip", "-j", "-n", p.name, "link", "show", "eth0")), &links); err != nil || len(links) != 1 {
		t.Fatalf("read eth0's MAC: %v", err)
	}
	p.podMAC = links[0].Address
	p.resolvConf = filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(p.resolvConf, []byte("nameserver "+p.gwIP+"\nsearch default.svc.cluster.local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// onNodeBridge moves the node end of the pod's veth onto a bridge that holds the gateway
// address, as the bridge CNI plugin lays out a node; hairpin as the plugin's hairpinMode, which
// sends the pod's broadcasts back to it. It returns the bridge's name.
func (p *podNetns) onNodeBridge(t *testing.T, hairpin bool) string {
	t.Helper()
	br := p.hostIf + "b"
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", br).Run() })
	run(t, "ip", "addr", "del", p.gwIP+"/24", "dev", p.hostIf)
	run(t, "ip", "link", "add", br, "type", "bridge")
	run(t, "ip", "addr", "add", p.gwIP+"/24", "dev", br)
	run(t, "ip", "link", "set", br, "up")
	run(t, "ip", "link", "set", p.hostIf, "master", br)
	if hairpin {
		run(t, "ip", "link", "set", p.hostIf, "type", "bridge_slave", "hairpin", "on")
	}
	return br
}

// runnerProc is a started runner with its console output captured.
type runnerProc struct {
	cmd *exec.Cmd
	// ns is the pod namespace the test's node agent took from the runner (nil before, or
	// with no network); agentErr what that agent met.
	ns         atomic.Pointer[os.File]
	agentErr   atomic.Pointer[error]
	stdout     lockedBuffer
	stderr     lockedBuffer
	markerSeen chan struct{}
	exited     chan struct{}
	termLog    string
	stateDir   string
	control    string                       // the control API's socket
	onLine     atomic.Pointer[func(string)] // called with each console line as it arrives
	exitCode   int
	waitErr    error
	markerOnce sync.Once
}

// bootCounter passes the runner's log on and counts, for make test's report, each guest the
// runner started and each migration it waited for (zap writes one line per Write).
type bootCounter struct {
	w    io.Writer
	test string
}

func (c bootCounter) Write(p []byte) (int, error) {
	switch {
	case bytes.Contains(p, []byte(`"guest started"`)):
		bootcount.Add(c.test, "guests")
	case bytes.Contains(p, []byte(`"waiting for the migrating guest"`)):
		bootcount.Add(c.test, "incoming")
	}
	return c.w.Write(p)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// baseArgs is a runner configuration for the guest fixture under TCG.
func baseArgs(t testing.TB, guest, name string) []string {
	return []string{
		"--name=" + name, "--accel=tcg", "--cpus=1", "--memory-mib=256",
		"--kernel=" + filepath.Join(guest, "boot", "vmlinuz"),
		"--initrd=" + filepath.Join(guest, "boot", "initrd.img"),
		"--root-disk=" + filepath.Join(guest, "disk", "root.img"),
		"--disk-size-mib=128", "--kernel-args=rw", "--grace-period-seconds=20",
	}
}

// startRunner starts the runner, inside netns when it is not empty.
func startRunner(t testing.TB, netns string, args ...string) *runnerProc {
	t.Helper()
	return startRunnerVia(t, netns, nil, args...)
}

// startRunnerVia starts the runner through the command wrap (which must exec its arguments),
// inside netns when it is not empty, as a runner pod runs it at Pod Security restricted: with
// no capability, and in a pod's namespace as the runner's user (vmv1.RunnerUID), while this
// test plays the node agent (runAgent). Without a namespace the runner is root with no
// capability: those tests hand it root's files (claims, disks in temporary directories).
func startRunnerVia(t testing.TB, netns string, wrap []string, args ...string) *runnerProc {
	t.Helper()
	bin := runnerBinary(t)
	r := &runnerProc{markerSeen: make(chan struct{}), exited: make(chan struct{})}
	asRunner := netns != ""
	dir := t.TempDir()
	if asRunner {
		dir = runnerDir(t)
		args = reachable(t, args)
	}
	r.termLog = filepath.Join(dir, "termination-log")
	r.stateDir = filepath.Join(dir, "state")
	args = append(args, "--termination-log="+r.termLog, "--state-dir="+r.stateDir)
	// Never the default control socket: it is one path on the host for every runner.
	r.control = filepath.Join(dir, "control", "runner.sock")
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--control-socket=") }) {
		args = append(args, "--control-socket="+r.control)
	}
	argv := append(append(append(append([]string(nil), wrap...), dropPrivileges(asRunner)...), bin), args...)
	if asRunner {
		argv = append(tunOwnedByRunner(t), argv...)
	}
	if netns != "" {
		argv = append([]string{"ip", "netns", "exec", netns}, argv...)
	}
	r.cmd = exec.Command(argv[0], argv[1:]...)
	pr, pw := io.Pipe()
	r.cmd.Stdout = pw
	r.cmd.Stderr = bootCounter{w: &r.stderr, test: t.Name()}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			r.stdout.Write([]byte(line + "\n"))
			if f := r.onLine.Load(); f != nil {
				(*f)(line)
			}
			if strings.Contains(line, marker) {
				r.markerOnce.Do(func() { close(r.markerSeen) })
			}
		}
	}()
	go func() {
		r.waitErr = r.cmd.Wait()
		pw.Close()
		r.exitCode = r.cmd.ProcessState.ExitCode()
		close(r.exited)
	}()
	if req, ok := agentRequest(t, args); ok && netns != "" {
		go r.runAgent(req)
	}
	t.Cleanup(func() {
		select {
		case <-r.exited:
		default:
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
		if ns := r.ns.Load(); ns != nil {
			ns.Close()
		}
		if t.Failed() {
			t.Logf("runner stdout (guest console):\n%s", tail(r.stdout.String(), 40))
			t.Logf("runner stderr:\n%s", tail(r.stderr.String(), 40))
			if err := r.agentErr.Load(); err != nil {
				t.Logf("node agent: %v", *err)
			}
		}
	})
	return r
}

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
	req := podnetwork.Request{Mode: runnerconfig.NetworkPod, Interface: "eth0",
		Owner: guestnet.TapOwner{UID: uint32(vmv1.RunnerUID), GID: uint32(vmv1.RunnerGID)}}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "--network":
			req.Mode = v
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
	return req, req.Mode != runnerconfig.NetworkNone
}

// runAgent does for the runner what the node agent does for a runner pod: it connects to the
// runner's netns.sock once it is there and plumbs the namespace handed over (podnetwork.Handle).
func (r *runnerProc) runAgent(req podnetwork.Request) {
	sock := filepath.Join(filepath.Dir(r.control), vmv1.NetnsSocketName)
	for {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Net: "unix", Name: sock})
		if err == nil {
			ns, _, err := podnetwork.Handle(c, req)
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
	ns, built, err := podnetwork.Handle(c, req)
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

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (r *runnerProc) waitMarker(t *testing.T, d time.Duration) {
	t.Helper()
	start := time.Now()
	select {
	case <-r.markerSeen:
		t.Logf("guest marker after %v", time.Since(start).Round(time.Millisecond))
	case <-r.exited:
		t.Fatalf("runner exited (code %d) before the guest marker: %s", r.exitCode, readFile(r.termLog))
	case <-time.After(d):
		t.Fatalf("no %s on the runner's stdout within %v", marker, d)
	}
}

// waitExit waits for the runner to exit and returns its exit code and termination message.
func (r *runnerProc) waitExit(t *testing.T, d time.Duration) (int, string) {
	t.Helper()
	select {
	case <-r.exited:
		return r.exitCode, readFile(r.termLog)
	case <-time.After(d):
		t.Fatalf("runner still running after %v", d)
		return 0, ""
	}
}

func (r *runnerProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// qemuPID finds the runner's qemu-system-x86_64 child.
func (r *runnerProc) qemuPID(t *testing.T) int {
	t.Helper()
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", r.cmd.Process.Pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(s)
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if strings.HasPrefix(strings.TrimSpace(string(comm)), "qemu-system") {
				return pid
			}
		}
	}
	t.Fatalf("no qemu child of runner %d", r.cmd.Process.Pid)
	return 0
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// httpGet fetches url with a bounded wait, retrying while the guest's server comes up.
func httpGet(ctx context.Context, url string) (string, error) {
	client := &http.Client{Timeout: 3 * time.Second}
	var lastErr error
	for ctx.Err() == nil {
		resp, err := client.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return string(b), nil
			}
			lastErr = fmt.Errorf("%s: %s", url, resp.Status)
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return "", lastErr
}

// childStatus returns /proc/<pid>/status of the child of parent whose command name starts with
// name.
func childStatus(t *testing.T, parent int, name string) string {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		fields := strings.Fields(s[end+1:])
		if open < 0 || end < open || len(fields) < 2 || fields[1] != strconv.Itoa(parent) || !strings.HasPrefix(s[open+1:end], name) {
			continue
		}
		st, err := os.ReadFile(filepath.Join(filepath.Dir(f), "status"))
		if err != nil {
			t.Fatal(err)
		}
		return string(st)
	}
	t.Fatalf("no child %s* of process %d", name, parent)
	return ""
}
