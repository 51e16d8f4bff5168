package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virtpod/virtpod/runner/status"

	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/agent/migration/streampipe"
	"github.com/virtpod/virtpod/agent/podcontrol"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/tests/prereq"
)

// The migration tests' harness: runners for one guest, their heartbeats, the control API's
// migration client and the relay in the node agents' place.

// qemuNext is Debian 13's QEMU 10.0 (make qemu-next), bind-mounted read-only, for the test's
// length, where the runner's user reaches it: the cache is under root's home.
func qemuNext(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("VIRTPOD_QEMU_NEXT")
	if dir == "" {
		dir = filepath.Join(prereq.Cache(), "qemu-next")
	}
	_, err := os.Stat(filepath.Join(dir, "qemu.json"))
	need(t, err == nil, "no QEMU 10.0 in "+dir+": run make qemu-next")
	reachable(t, nil) // makes the share directory
	at, err := os.MkdirTemp(shareDir, "qemu-next-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(at, 0o755)
	if err := unix.Mount(dir, at, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(at, unix.MNT_DETACH); _ = os.Remove(at) })
	if err := unix.Mount("", at, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("making %s read-only: %v", at, err)
	}
	return filepath.Join(at, "bin", "qemu-system-x86_64")
}

// sharedClaim is the folder of the test's shared claim (migrate=shared), which every runner
// attaches.
func sharedClaim(t testing.TB, mt *migrationTest) string {
	t.Helper()
	for _, a := range mt.args {
		if d, ok := strings.CutPrefix(a, "--disk=name=shared,kind=file,path="); ok {
			return strings.Split(d, ",")[0]
		}
	}
	t.Fatal("no shared claim")
	return ""
}

// migrationTest starts runners for one guest: the source boots it, each target receives it.
type migrationTest struct {
	args    []string
	network string
	pods    int // network namespaces made so far
}

func newMigrationTest(t testing.TB, guest, name, network string, memMiB int) *migrationTest {
	args := baseArgs(t, guest, name)
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--kernel-args="):
			args[i] = "--kernel-args=rw virtpod.heartbeat"
		case strings.HasPrefix(a, "--memory-mib="):
			args[i] = "--memory-mib=" + strconv.Itoa(memMiB)
		case strings.HasPrefix(a, "--kernel="):
			// Moves run the PVH vmlinux that VM images store (pkg/kernel/pvhkernel), across QEMU 7.2
			// and 10.0; the other runner tests boot the fixture's bzImage.
			args[i] = "--kernel=" + pvhKernel(t, strings.TrimPrefix(a, "--kernel="))
		}
	}
	// Disks a move copies whole: claims of each runner's own (migrate=copy, as node-local
	// claims: the root disk, filled from its image at the first boot, and a data disk) and an
	// emptyDir disk. The e2e test moves a root overlay, mirrored over its base.
	args = append(args, "--root-volume=kind=file,path="+perRunnerDir+"-root,migrate=copy",
		"--disk=name=data,kind=file,path="+perRunnerDir+",size-mib=16,migrate=copy",
		"--disk=name=scratch,kind=empty,path="+perRunnerDir+"-scratch,size-mib=8",
		// And a claim every runner attaches, as a ReadWriteMany one: never copied.
		"--disk=name=shared,kind=file,path="+claimDir(t, network)+",size-mib=8,migrate=shared")
	// A cloud-init seed: a read-only drive, which the migration must leave alone.
	userData := filepath.Join(t.TempDir(), "user-data")
	if err := os.WriteFile(userData, []byte("#cloud-config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The machine pinned as the controller pins it, so the guest can move onto another QEMU.
	args = append(args, "--network="+network, "--cloud-init-user-data="+userData, "--instance-id=0b5f6a43-migrate", "--machine=pc-q35-7.2")
	if network == "masquerade" {
		args = append(args, "--port=http:80/TCP")
	}
	return &migrationTest{args: args, network: network}
}

// pvhKernel unpacks bzImage into a vmlinux in a temporary directory and returns its path.
func pvhKernel(t testing.TB, bzImage string) string {
	t.Helper()
	b, err := os.ReadFile(bzImage)
	if err != nil {
		t.Fatal(err)
	}
	k, err := pvhkernel.Unpack(b)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "vmlinux")
	if err := os.WriteFile(out, k, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

func (mt *migrationTest) boot(t testing.TB) *migrationRunner {
	t.Helper()
	m := mt.start(t, mt.args)
	select {
	case <-m.r.markerSeen:
	case <-m.r.exited:
		t.Fatalf("runner exited before the guest marker: %s", readFile(m.r.termLog))
	case <-time.After(bootTimeout):
		t.Fatalf("no %s within %v", marker, bootTimeout)
	}
	m.heartbeatGoesOn(t)
	return m
}

// target starts a runner with --incoming and waits for it to wait for its guest.
func (mt *migrationTest) target(t testing.TB) *migrationRunner { return mt.targetWith(t, "") }

// targetBooting is target with QEMU given another kernel file, loaded by QEMU itself (the
// test's node agent unpacks none for it): the same kernel as a bzImage, say, which QEMU loads in
// another way (through fw_cfg and linuxboot_dma.bin rather than pvh.bin). The guest moving in
// runs the kernel already in its memory; what QEMU loaded only matters at a reboot.
func (mt *migrationTest) targetBooting(t testing.TB, kernel string) *migrationRunner {
	t.Helper()
	kernelsOff.Store(true)
	defer kernelsOff.Store(false)
	args := append([]string{}, mt.args...)
	for i, a := range args {
		if strings.HasPrefix(a, "--kernel=") {
			args[i] = "--kernel=" + kernel
		}
	}
	return mt.incoming(t, args)
}

// targetWith is target with another QEMU binary ("": the host's).
func (mt *migrationTest) targetWith(t testing.TB, qemu string) *migrationRunner {
	t.Helper()
	if qemu != "" {
		restore := os.Getenv(binaries.EnvQEMU)
		os.Setenv(binaries.EnvQEMU, qemu) // the runner reads it at its start
		defer os.Setenv(binaries.EnvQEMU, restore)
	}
	return mt.incoming(t, mt.args)
}

// incoming starts a runner with args and --incoming, and waits for it to be ready for the guest.
func (mt *migrationTest) incoming(t testing.TB, args []string) *migrationRunner {
	t.Helper()
	m := mt.start(t, append(append([]string{}, args...), "--incoming"))
	m.wantState(t, status.StateIncoming)
	return m
}

// start starts a runner; with the masquerade network, in an IPv6-only pod-like network namespace
// of its own (fd00:213:40+n::2).
func (mt *migrationTest) start(t testing.TB, args []string) *migrationRunner {
	t.Helper()
	args = append([]string(nil), args...)
	for i, a := range args {
		for _, suffix := range []string{"-scratch", "-root", ""} {
			a = strings.ReplaceAll(a, perRunnerDir+suffix, claimDir(t, mt.network))
		}
		args[i] = a
	}
	if mt.network != "masquerade" {
		return startMigrationRunner(t, "", args)
	}
	tt, ok := t.(*testing.T)
	if !ok {
		t.Fatal("network namespaces are made for tests only")
	}
	mt.pods++
	ns := newPodNetns(tt, 40+mt.pods)
	ns.ipv6Only(tt, 40+mt.pods)
	m := startMigrationRunner(t, ns.name, append(args, "--resolv-conf="+ns.resolvConf))
	m.podIP = ns.podIP6
	return m
}

// perRunnerDir in an argument (alone, or with -scratch or -root) is replaced with a directory
// of each runner's own: its claim.
const perRunnerDir = "/per-runner-dir"

// claimDir is a folder for a claim: the runner's user's when the runner runs as that user (in a
// pod's network namespace), root's otherwise (root without capabilities, startRunnerVia).
func claimDir(t testing.TB, network string) string {
	if network == "masquerade" {
		return runnerDir(t)
	}
	return t.TempDir()
}

// rootClaim is the folder of a runner's root claim (--root-volume).
func (m *migrationRunner) rootClaim(t testing.TB) string {
	t.Helper()
	for _, a := range m.r.cmd.Args {
		if v, ok := strings.CutPrefix(a, "--root-volume="); ok {
			d, err := runnerconfig.ParseDisk(v)
			if err != nil {
				t.Fatal(err)
			}
			return d.Path
		}
	}
	t.Fatal("no --root-volume")
	return ""
}

// guestDisk is the shell's name of the guest's disk with serial.
func guestDisk(serial string) string {
	return `$(for b in /sys/block/vd*; do [ "$(cat $b/serial 2>/dev/null)" = ` + serial + ` ] && echo /dev/${b##*/}; done)`
}

// migrationRunner is a runner whose console's heartbeats are counted.
type migrationRunner struct {
	podIP string // its network namespace's (IPv6) pod IP, with the masquerade network
	r     *runnerProc
	mu    sync.Mutex
	hb    []int
	hbAt  []time.Time   // when each heartbeat was read
	seen  chan struct{} // gets a value at each heartbeat
}

var heartbeatLine = regexp.MustCompile(`VIRTPOD-HB (\d+)$`)

func startMigrationRunner(t testing.TB, netns string, args []string) *migrationRunner {
	m := &migrationRunner{seen: make(chan struct{}, 1)}
	m.r = startRunner(t, netns, args...)
	on := func(line string) {
		if g := heartbeatLine.FindStringSubmatch(strings.TrimSpace(line)); g != nil && strings.HasPrefix(strings.TrimSpace(line), "VIRTPOD-HB") {
			n, _ := strconv.Atoi(g[1])
			m.mu.Lock()
			m.hb, m.hbAt = append(m.hb, n), append(m.hbAt, time.Now())
			m.mu.Unlock()
			select {
			case m.seen <- struct{}{}:
			default:
			}
		}
	}
	m.r.onLine.Store(&on)
	return m
}

func (m *migrationRunner) lastHeartbeat() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.hb) == 0 {
		return 0
	}
	return m.hb[len(m.hb)-1]
}

// waitHeartbeat returns the first heartbeat this runner's console showed, waiting for one.
func (m *migrationRunner) waitHeartbeat(t testing.TB) int {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
		m.mu.Lock()
		n := len(m.hb)
		first := 0
		if n > 0 {
			first = m.hb[0]
		}
		m.mu.Unlock()
		if n > 0 {
			return first
		}
		select {
		case <-m.seen:
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("no heartbeat on the console:\n%s", tail(m.r.stdout.String(), 10))
	return 0
}

// heartbeatGoesOn waits for ten more heartbeats, each following the last: the guest runs here,
// without restarting.
func (m *migrationRunner) heartbeatGoesOn(t testing.TB) {
	t.Helper()
	start := m.lastHeartbeat()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
		m.mu.Lock()
		hb := append([]int(nil), m.hb...)
		m.mu.Unlock()
		for i := 1; i < len(hb); i++ {
			// Another console line may swallow one (the guest's shell writes too), never more,
			// and the count never starts again.
			if (hb[i] <= hb[i-1] || hb[i] > hb[i-1]+3) && hb[i-1] >= start {
				t.Fatalf("heartbeat %d followed by %d", hb[i-1], hb[i])
			}
		}
		if len(hb) > 0 && hb[len(hb)-1] >= start+10 {
			return
		}
		select {
		case <-m.seen:
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("the heartbeat stopped at %d (was %d):\n%s", m.lastHeartbeat(), start, tail(m.r.stdout.String(), 10))
}

func (m *migrationRunner) status(t testing.TB) status.Status {
	t.Helper()
	code, body := runnerGet(t, m.r.stateDir, "/status")
	var st status.Status
	if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
		t.Fatalf("/status: %d %q %v", code, body, err)
	}
	return st
}

// wantState waits briefly for the runner's /status to report state.
func (m *migrationRunner) wantState(t testing.TB, state string) {
	t.Helper()
	var st status.Status
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		select {
		case <-m.r.exited:
			t.Fatalf("runner exited (%d) waiting for state %s: %s", m.r.exitCode, state, readFile(m.r.termLog))
		default:
		}
		if _, err := os.Stat(filepath.Join(m.r.stateDir, "runner.sock")); err != nil {
			continue
		}
		if st = m.status(t); st.State == state {
			return
		}
	}
	t.Fatalf("runner state %+v, want %s", st, state)
}

func (m *migrationRunner) waitRunning(t testing.TB) { t.Helper(); m.wantState(t, status.StateRunning) }

// runnerGet GETs path from the runner's HTTP endpoint (the default unix socket).
func runnerGet(t testing.TB, stateDir, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(stateDir, "runner.sock"))
	}}}
	resp, err := c.Get("http://runner" + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

type migClient struct{ c *http.Client }

func migrationClient(sock string) migClient { return migClient{controlClient(sock).c} }

// MigrationRequestBody is a PUT body with a bandwidth and downtime limit (0: the defaults).
func MigrationRequestBody(bandwidthMiBps, downtimeMs int64) string {
	b, _ := json.Marshal(controlapi.MigrationRequest{BandwidthMiBps: bandwidthMiBps, DowntimeLimitMs: downtimeMs, AutoConverge: true})
	return string(b)
}

func (c migClient) do(t testing.TB, method, body string) (int, controlapi.MigrationStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, "http://runner"+controlapi.MigrationPath, rd)
	resp, err := c.c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, controlapi.MigrationPath, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var s controlapi.MigrationStatus
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s %s: %d %q: %v", method, controlapi.MigrationPath, resp.StatusCode, b, err)
	}
	return resp.StatusCode, s
}

func (c migClient) put(t testing.TB, body string, want int) controlapi.MigrationStatus {
	t.Helper()
	code, s := c.do(t, http.MethodPut, body)
	if code != want {
		t.Fatalf("PUT %s: %d %+v, want %d", body, code, s, want)
	}
	return s
}

// waitMigration polls GET, as the node agent does, until done accepts the status.
func waitMigration(t testing.TB, c migClient, done func(controlapi.MigrationStatus) bool) controlapi.MigrationStatus {
	t.Helper()
	var s controlapi.MigrationStatus
	for end := time.Now().Add(3 * time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		var code int
		if code, s = c.do(t, http.MethodGet, ""); code == http.StatusOK && done(s) {
			return s
		}
	}
	t.Fatalf("migration status %+v after 3 minutes", s)
	return s
}

// newMigrationRelay plays both node agents: it listens on the source's migrate-out.sock and
// nbd-out.sock and relays QEMU's connections to the target's migrate-in.sock (once) and
// nbd-in.sock (one connection per mirrored disk), as the agents do (agent/migration/streampipe).
func newMigrationRelay(t testing.TB, src, dst *runnerProc) {
	t.Helper()
	srcDir, dstDir := filepath.Dir(src.control), filepath.Dir(dst.control)
	relaySocket(t, srcDir, controlapi.MigrateOutSocket, filepath.Join(dstDir, controlapi.MigrateInSocket), 1)
	relaySocket(t, srcDir, controlapi.NBDOutSocket, filepath.Join(dstDir, controlapi.NBDInSocket), 0)
}

// relaySocket listens on name in the control directory dir, as the agent makes it (the runner's
// user's, whose QEMU connects), and relays up to max connections (0: any number) to in.
func relaySocket(t testing.TB, dir, name, in string, max int) {
	l, err := podcontrol.Control{Root: filepath.Dir(dir), Device: filepath.Base(dir)}.Listen(name)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	closeAll := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	}
	t.Cleanup(func() { _ = l.Close(); closeAll() })
	go func() {
		for n := 1; ; n++ {
			a, err := l.Accept()
			if max > 0 && n == max {
				_ = l.Close()
			}
			if err != nil {
				return
			}
			b, err := net.Dial("unix", in)
			mu.Lock()
			conns = append(conns, a)
			if err == nil {
				conns = append(conns, b)
			}
			mu.Unlock()
			if err != nil {
				_ = a.Close()
				continue
			}
			go func() { _, _ = streampipe.Pipe(a, a, b, b) }()
		}
	}()
}

// writerSectors is the last WRITER-SECTORS-<n> count on a console.
func writerSectors(console string) int {
	m := regexp.MustCompile(`WRITER-SECTORS-(\d+)`).FindAllStringSubmatch(console, -1)
	if len(m) == 0 {
		return -1
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// consoleRun types cmd on the guest's serial console and waits for it to finish; each of want
// must be in what it printed (heartbeat lines may come between them). The end marker is computed by the shell, so the echo of the
// typed line cannot match it.
func consoleRun(t *testing.T, r *runnerProc, cmd string, want ...string) {
	t.Helper()
	con := attachLocalConsole(t, runnerBinary(t), r.stateDir)
	n := time.Now().UnixNano() % 100000
	if _, err := fmt.Fprintf(con.in, "%s; echo DONE-$((%d+1))\n", cmd, n); err != nil {
		t.Fatal(err)
	}
	end := fmt.Sprintf("DONE-%d", n+1)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		out := con.out.String()
		if i := strings.Index(out, end); i >= 0 {
			for _, w := range want {
				if !strings.Contains(out[:i], w) {
					t.Fatalf("%q printed %q, want %q", cmd, out[:i], w)
				}
			}
			return
		}
	}
	t.Fatalf("%q did not finish on the console:\n%s", cmd, tail(con.out.String(), 10))
}
