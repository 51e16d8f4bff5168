package runner_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

	"github.com/virtpod/virtpod/tests/bootcount"
	"github.com/virtpod/virtpod/tests/prereq"
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
		out, err := exec.Command("go", append(args, "github.com/virtpod/virtpod/cmd/virtpod-runner")...).CombinedOutput()
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
	// podIP6 and gwIP6 (fd00:213:<n>::2/64 and ::1) once dualStack made the pod dual-stack.
	podIP6, gwIP6 string
	podMAC        string // eth0's MAC before the runner starts
	resolvConf    string
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

// dualStack gives the pod fd00:213:<n>::2/64 beside its IPv4 address, with the node's end at
// ::1 as its IPv6 default gateway (a global one, as the bridge CNI plugin sets it) and a
// nameserver of each family in its resolv.conf. Before onNodeBridge, which moves the gateway.
func (p *podNetns) dualStack(t *testing.T, n int) {
	t.Helper()
	p.podIP6, p.gwIP6 = fmt.Sprintf("fd00:213:%d::2", n), fmt.Sprintf("fd00:213:%d::1", n)
	run(t, "ip", "addr", "add", p.gwIP6+"/64", "dev", p.hostIf, "nodad")
	run(t, "ip", "-n", p.name, "addr", "add", p.podIP6+"/64", "dev", "eth0", "nodad")
	run(t, "ip", "-n", p.name, "-6", "route", "add", "default", "via", p.gwIP6)
	if err := os.WriteFile(p.resolvConf, []byte("nameserver "+p.gwIP+"\nnameserver "+p.gwIP6+"\nsearch default.svc.cluster.local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ipv6Only makes the pod IPv6-only: dualStack's address and route, and no IPv4 address, route
// or nameserver left.
func (p *podNetns) ipv6Only(t *testing.T, n int) {
	t.Helper()
	p.dualStack(t, n)
	run(t, "ip", "-n", p.name, "addr", "del", p.podIP+"/24", "dev", "eth0")
	p.podIP = ""
	if err := os.WriteFile(p.resolvConf, []byte("nameserver "+p.gwIP6+"\nsearch default.svc.cluster.local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
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
	if p.gwIP6 != "" {
		run(t, "ip", "addr", "del", p.gwIP6+"/64", "dev", p.hostIf)
		run(t, "ip", "addr", "add", p.gwIP6+"/64", "dev", br, "nodad")
	}
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
		"--disk-size-mib=128", "--kernel-args=rw", "--grace-period-seconds=20", "--guest-agent",
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
	for _, pid := range r.children() {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.HasPrefix(strings.TrimSpace(string(comm)), "qemu-system") {
			return pid
		}
	}
	t.Fatalf("no qemu child of runner %d", r.cmd.Process.Pid)
	return 0
}

// children lists the runner's child processes (its hypervisor; QEMU 10.0 runs through its
// tree's loader, so its name is the loader's).
func (r *runnerProc) children() []int {
	var pids []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", r.cmd.Process.Pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(s); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// waitGone waits until none of pids runs, as a pod is gone only when all its processes are.
// A process is gone when no thread of it is left but a zombie: a killed process's leader can be
// a zombie while its other threads still exit, and its files (and their locks) stay open until
// the last one has.
func waitGone(t *testing.T, pids []int, d time.Duration) {
	t.Helper()
	start := time.Now()
	for end := start.Add(d); ; time.Sleep(50 * time.Millisecond) {
		var alive []string
		for _, pid := range pids {
			stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
			for _, f := range stats {
				b, err := os.ReadFile(f)
				// The state follows the command's closing parenthesis: Z is a zombie, X dead.
				if _, rest, ok := strings.Cut(string(b), ") "); err == nil && ok && rest[0] != 'Z' && rest[0] != 'X' {
					// What each thread waits on, for a failure that has to say why it lingers.
					comm, _ := os.ReadFile(filepath.Join(filepath.Dir(f), "comm"))
					wchan, _ := os.ReadFile(filepath.Join(filepath.Dir(f), "wchan"))
					alive = append(alive, fmt.Sprintf("%s %s (%c, in %s)", filepath.Base(filepath.Dir(f)), strings.TrimSpace(string(comm)), rest[0], wchan))
				}
			}
		}
		if len(alive) == 0 {
			t.Logf("processes %v gone %v after their runner", pids, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(end) {
			t.Fatalf("threads still running %v after their runner died: %v", d, alive)
		}
	}
}

// reap does what a container runtime does once a pod's runner is gone: it kills what is left of
// the runner's processes. In a pod nothing outlives its container; here QEMU 10 (started
// through its loader wrapper) once outlived its SIGKILLed runner for hours, in sleep, its
// parent-death signal never acted on. Processes still there after grace are killed, and named.
func reap(t *testing.T, pids []int, grace time.Duration) {
	t.Helper()
	for end := time.Now().Add(grace); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if len(living(pids)) == 0 {
			return
		}
	}
	for _, pid := range living(pids) {
		t.Logf("process %d outlived its runner by %v: killed, as the container runtime would", pid, grace)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// living are the pids whose process is there and not a zombie.
func living(pids []int) []int {
	var out []int
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if _, rest, ok := strings.Cut(string(b), ") "); err == nil && ok && rest[0] != 'Z' && rest[0] != 'X' {
			out = append(out, pid)
		}
	}
	return out
}

// lockHolders names every process that has path open, with the locks it holds on it (QEMU's
// are OFD locks, which /proc/locks lists with no process: its fdinfo names them), for a failure
// that blames a lock.
func lockHolders(path string) string {
	want, err := os.Stat(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		// By the file, not its name: another mount namespace names it otherwise.
		if fi, err := os.Stat(fd); err != nil || !os.SameFile(fi, want) {
			continue
		}
		proc := filepath.Dir(filepath.Dir(fd))
		cmd, _ := os.ReadFile(filepath.Join(proc, "cmdline"))
		info, _ := os.ReadFile(filepath.Join(proc, "fdinfo", filepath.Base(fd)))
		var locks []string
		for _, l := range strings.Split(string(info), "\n") {
			if strings.HasPrefix(l, "lock:") {
				locks = append(locks, strings.Join(strings.Fields(l), " "))
			}
		}
		out = append(out, fmt.Sprintf("%s (%.100s): %v", proc, strings.ReplaceAll(string(cmd), "\x00", " "), locks))
	}
	if len(out) == 0 {
		return "nobody has " + path + " open"
	}
	return strings.Join(out, "\n")
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
	st, err := os.ReadFile(filepath.Join(childProc(t, parent, name), "status"))
	if err != nil {
		t.Fatal(err)
	}
	return string(st)
}

// childProc is the /proc directory of parent's child whose name starts with name.
func childProc(t *testing.T, parent int, name string) string {
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
		return filepath.Dir(f)
	}
	t.Fatalf("no child %s* of process %d", name, parent)
	return ""
}
