package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtpod/virtpod/runner/status"

	"github.com/virtpod/virtpod/tests/loopback"
	"github.com/virtpod/virtpod/tests/rawhttp"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner"
	"github.com/virtpod/virtpod/runner/kvm"
)

// bootTimeout bounds a TCG boot of the fixture (about 5 s on an idle 2-core machine).
const bootTimeout = 90 * time.Second

// TestGuestBootsServesAndStopsOnSIGTERM is the pod's whole life: the guest takes over the
// namespace's IP and MAC, serves HTTP there to the host side, reads and writes its virtio-fs
// shares, shows its screen (screenshot and VNC) and its counters (GET /v1/stats), is ready by
// the exec probe, and powers off cleanly on SIGTERM.
func TestGuestBootsServesAndStopsOnSIGTERM(t *testing.T) {
	guest := needGuestHost(t)
	ns := newPodNetns(t, 1)
	fs, fsArgs, fsKernelArgs := withShares(t)
	args := append(baseArgs(t, guest, "vm-e2e"), "--network=pod", "--resolv-conf="+ns.resolvConf, "--readiness-probe=http:80/", "--kernel-args=rw "+fsKernelArgs)
	started := time.Now()
	r := startRunner(t, ns.name, append(append(args, fsArgs...), displayArgs(t)...)...)
	r.waitMarker(t, bootTimeout)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body, err := httpGet(ctx, "http://"+ns.podIP+"/")
	if err != nil {
		t.Fatalf("guest HTTP at the pod IP from the host side: %v", err)
	}
	if !strings.Contains(body, "virtpod guest vm-e2e") {
		t.Fatalf("guest answered %q, want its hostname vm-e2e (from ip=)", body)
	}
	// The pod network's neighbour entry for the pod IP must still be the original MAC: the guest
	// took it over.
	neigh := run(t, "ip", "neigh", "show", ns.podIP, "dev", ns.hostIf)
	if !strings.Contains(neigh, ns.podMAC) {
		t.Fatalf("neighbour entry for %s is %q, want the pod's original MAC %s", ns.podIP, neigh, ns.podMAC)
	}
	if !strings.Contains(r.stdout.String(), "ip="+ns.podIP) {
		t.Fatalf("guest did not get the pod IP from ip=: %s", tail(r.stdout.String(), 5))
	}
	// A node agent restarted while the guest runs asks again: the runner says its network is
	// plumbed, nothing is rebuilt, and the guest still answers at the pod IP.
	if built, err := r.agentAgain(t); err != nil || built {
		t.Fatalf("a restarted agent's handoff: built %v, %v; want nothing rebuilt", built, err)
	}
	if _, err := httpGet(ctx, "http://"+ns.podIP+"/"); err != nil {
		t.Fatalf("guest HTTP after the agent's restart: %v", err)
	}

	// The runner is the runner pod's user with no capability at all (the node agent plumbed the
	// namespace), and QEMU, its child, the same.
	self := readFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	for _, want := range []string{fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", vmv1.RunnerUID, vmv1.RunnerUID, vmv1.RunnerUID, vmv1.RunnerUID), "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000"} {
		if !strings.Contains(self, want) {
			t.Errorf("the runner's /proc status lacks %q:\n%s", want, self)
		}
	}
	procStatus := childStatus(t, r.cmd.Process.Pid, "qemu-system")
	for _, want := range []string{"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1"} {
		if !strings.Contains(procStatus, want) {
			t.Errorf("QEMU's /proc status lacks %q:\n%s", want, procStatus)
		}
	}

	checkUnpackedKernel(t, r)

	// virtio-fs: the shares reach the guest both ways, live, through unprivileged virtiofsd.
	checkShares(t, r, fs, ns.podIP)

	// The display and the counters, as vmctl screenshot, vmctl vnc and the node agent see them.
	checkDisplay(t, r, ns.name)
	checkStats(t, r, ns.name, ns.podIP, fs.web, started)

	// The kubelet's exec probe, run inside the pod's namespace like the kubelet would: ready, as
	// the guest runs and its readiness probe (HTTP on the port it serves) passes.
	bin := runnerBinary(t)
	if out, err := waitProbe(ns.name, bin, r.stateDir, func(out string, err error) bool { return err == nil }); err != nil {
		t.Fatalf("runner probe: %v %s", err, out)
	}
	st := readStatus(t, ns.name, r.stateDir)
	if p := st.ReadinessProbe; p == nil || p.Probe != "http:80/" || !p.Passed || p.Message != "" || p.LastChecked.IsZero() {
		t.Errorf("/status readinessProbe = %+v, want http:80/ passed", p)
	}
	if st.State != status.StateRunning || st.Hypervisor != "qemu" || st.Acceleration != "tcg" || !strings.HasPrefix(st.Version, "7.") && !strings.HasPrefix(st.Version, "8.") && !strings.HasPrefix(st.Version, "9.") || st.UptimeSeconds <= 0 {
		t.Fatalf("/status = %+v", st)
	}

	// The guest agent (qemu-guest-agent in the guest) answers on its channel: the OS, the
	// hostname and the pod IP the guest took over.
	g := agentFacts(t, r, true)
	if g.OS == nil || g.OS.ID != "virtpod-fixture" || g.OS.KernelRelease == "" || g.Hostname != "vm-e2e" ||
		!slices.ContainsFunc(g.Interfaces, func(i vmv1.GuestInterface) bool {
			return i.Name == "eth0" && slices.ContainsFunc(i.IPs, func(ip string) bool { return strings.HasPrefix(ip, ns.podIP+"/") })
		}) {
		t.Errorf("guest agent facts %+v (os %+v), want the fixture, vm-e2e and eth0 with %s", g, g.OS, ns.podIP)
	}

	// SIGTERM: the agent is asked to power the guest off, before any power button.
	r.signal(t, syscall.SIGTERM)
	code, msg := r.waitExit(t, 30*time.Second)
	if code != runner.ExitOK || msg != "stopped on SIGTERM: guest powered off" {
		t.Fatalf("after SIGTERM: exit %d, termination message %q", code, msg)
	}
	console := r.stdout.String()
	if !strings.Contains(console, "reboot: Power down") || !strings.Contains(console, "the guest agent asked to power off") || strings.Contains(console, "power button pressed") {
		t.Fatalf("the guest console does not show the agent's power-off:\n%s", tail(console, 10))
	}
}

// checkUnpackedKernel: the fixture's kernel is a bzImage, which the runner handed to the node
// agent with its namespace; QEMU loaded the PVH kernel the agent unpacked into its store, from
// that file (mapped), not a copy of the bzImage in its own memory.
func checkUnpackedKernel(t *testing.T, r *runnerProc) {
	t.Helper()
	proc := childProc(t, r.cmd.Process.Pid, "qemu-system")
	cmdline := strings.ReplaceAll(readFile(filepath.Join(proc, "cmdline")), "\x00", " ")
	if !strings.Contains(cmdline, "-kernel /proc/self/fd/") {
		t.Errorf("QEMU's -kernel is not the descriptor the agent handed over: %s", cmdline)
	}
	store := filepath.Join(shareDir, "kernels") + "/"
	if maps := readFile(filepath.Join(proc, "maps")); !strings.Contains(maps, store) || !strings.Contains(maps, ".vmlinux") {
		t.Errorf("QEMU maps no kernel from the agent's store %s", store)
	}
	if log := r.stderr.String(); !strings.Contains(log, "booting the PVH kernel inside it, which the node agent unpacked") {
		t.Errorf("the runner does not say it boots the unpacked kernel:\n%s", tail(log, 20))
	}
}

// agentFacts reads GET /v1/guest until the agent's connection is as wanted.
func agentFacts(t *testing.T, r *runnerProc, connected bool) controlapi.Guest {
	t.Helper()
	c := controlOf(r)
	defer c.Close()
	var g controlapi.Guest
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if g, err = c.Guest(context.Background()); err == nil && g.Channel && g.Connected == connected {
			return g
		}
	}
	t.Fatalf("GET /v1/guest: %+v, %v; want a channel, connected %v", g, err, connected)
	return g
}

// TestGuestIgnoringPowerButtonIsStoppedAfterGrace: a guest that ignores the ACPI power button is
// stopped when the grace period ends, and the exit says so.
func TestGuestIgnoringPowerButtonIsStoppedAfterGrace(t *testing.T) {
	guest := needGuestHost(t)
	args := baseArgs(t, guest, "vm-grace")
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--kernel-args="):
			args[i] = "--kernel-args=rw virtpod.ignore-power-button virtpod.no-agent"
		case strings.HasPrefix(a, "--grace-period-seconds="):
			args[i] = "--grace-period-seconds=3"
		}
	}
	r := startRunner(t, "", append(args, "--network=none", "--http-addr="+loopback.FreeAddr(t))...)
	r.waitMarker(t, bootTimeout)
	// The guest has the channel but runs no agent: it says so, and the stop falls back to the
	// power button, which this guest ignores.
	if g := agentFacts(t, r, false); g.OS != nil || g.Error != "" {
		t.Errorf("a guest without an agent: %+v", g)
	}
	start := time.Now()
	r.signal(t, syscall.SIGTERM)
	code, msg := r.waitExit(t, 30*time.Second)
	took := time.Since(start)
	if code != runner.ExitGraceExpired || !strings.Contains(msg, "did not power off within the grace period (3s) after SIGTERM") {
		t.Fatalf("exit %d, termination message %q", code, msg)
	}
	if took < 3*time.Second || took > 15*time.Second {
		t.Fatalf("stopped %v after SIGTERM, want about the 3 s grace period", took)
	}
}

// TestQEMUKilledIsReported: QEMU dying under the runner is a failure with the reason in the
// exit code and the termination message. Before that, the same boot checks a readiness probe on a
// port the guest does not open: the guest runs, yet the runner is not ready, and the exec probe
// prints why (the line the kubelet puts in the pod's Unhealthy event).
//
// The pod is IPv6-only: the guest takes the pod's address from the runner's DHCPv6 (no ip=, no
// DHCP), the node reaches it there, and the port relay and the probe reach it from the bridge's
// link-local relay address (the probe's refusal comes back that way too).
func TestQEMUKilledIsReported(t *testing.T) {
	guest := needGuestHost(t)
	ns := newPodNetns(t, 6)
	ns.ipv6Only(t, 6)
	r := startRunner(t, ns.name, append(baseArgs(t, guest, "vm-kill"), "--network=pod", "--resolv-conf="+ns.resolvConf,
		"--readiness-probe=tcp:81", "--port=http:80/TCP")...)
	r.waitMarker(t, bootTimeout)
	want6 := "VIRTPOD-GUEST-IPV6 " + ns.podIP6 + " dns=" + ns.gwIP6
	for deadline := time.Now().Add(90 * time.Second); !strings.Contains(r.stdout.String(), want6); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the guest did not take the pod's IPv6 address (%q missing):\n%s", want6, tail(r.stdout.String(), 10))
		}
	}
	if _, err := httpGet(context.Background(), "http://["+ns.podIP6+"]/"); err != nil {
		t.Fatalf("the guest's network is not up: %v", err)
	}
	err := inNetns(ns.name, func() error {
		body, err := rawhttp.Get("127.0.0.1:80")
		// No ip= names the host in an IPv6-only pod: the fixture's page says "(none)".
		if err == nil && !strings.Contains(body, "virtpod guest ") {
			err = fmt.Errorf("answered %q", body)
		}
		return err
	})
	if err != nil {
		t.Fatalf("guest HTTP through the relay on the pod's loopback: %v", err)
	}
	want := "guest readiness probe tcp :81: connection refused"
	out, err := waitProbe(ns.name, runnerBinary(t), r.stateDir, func(out string, err error) bool { return strings.TrimSpace(out) == want })
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || strings.TrimSpace(out) != want {
		t.Fatalf("runner probe with the guest running and port 81 closed: %v, output %q; want exit 1 and %q", err, out, want)
	}
	st := readStatus(t, ns.name, r.stateDir)
	if p := st.ReadinessProbe; st.State != status.StateRunning || p == nil || p.Passed || p.Message != "connection refused" || p.ConsecutiveFailures < 1 {
		t.Fatalf("/status = %+v, probe %+v", st, p)
	}
	pid := r.qemuPID(t)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	code, msg := r.waitExit(t, 20*time.Second)
	if code != runner.ExitHypervisorFailed || !strings.Contains(msg, "qemu-system-x86_64 exited unexpectedly") || !strings.Contains(msg, "signal: killed") {
		t.Fatalf("after killing QEMU: exit %d, termination message %q", code, msg)
	}
}

// TestProviderBinaryMissing: the message users asked for, exactly.
func TestProviderBinaryMissing(t *testing.T) {
	missing := "/nonexistent/virtpod/qemu-system-x86_64"
	r := startRunner(t, "", "--name=vm-missing", "--accel=tcg", "--cpus=1", "--memory-mib=128",
		"--kernel=/virtpod/images/kernel/boot/vmlinuz", "--root-disk=/virtpod/images/disk/disk/root.img",
		"--network=none", "--qemu-binary="+missing)
	code, msg := r.waitExit(t, 20*time.Second)
	want := "provider binary not found: qemu-system-x86_64 (" + missing + ")"
	if code != runner.ExitProviderMissing || msg != want {
		t.Fatalf("exit %d, termination message %q; want %d, %q", code, msg, runner.ExitProviderMissing, want)
	}
	if !strings.Contains(r.stderr.String(), want) {
		t.Fatalf("stderr does not state %q:\n%s", want, r.stderr.String())
	}
	// A guest with shares on a runner without virtiofsd (the Debian 12 image) is refused the
	// same way, naming the image that has it.
	nofs := "/nonexistent/virtpod/virtiofsd"
	r3 := startRunner(t, "", "--name=vm-missing", "--accel=tcg", "--cpus=1", "--memory-mib=128",
		"--kernel=/virtpod/images/kernel/boot/vmlinuz", "--root-disk=/virtpod/images/disk/disk/root.img",
		"--network=none", "--virtiofsd-binary="+nofs, "--filesystem=tag=web,path="+t.TempDir())
	wantFS := "virtiofsd not found (" + nofs + "): spec.guest.filesystems needs a runner image with virtiofsd, such as the default runner (docs/filesystems.md)"
	if code, msg := r3.waitExit(t, 20*time.Second); code != runner.ExitProviderMissing || msg != wantFS {
		t.Fatalf("shares without virtiofsd: exit %d, %q; want %d, %q", code, msg, runner.ExitProviderMissing, wantFS)
	}
	// The environment variable moves the binary too, for images that install it elsewhere.
	r2 := startRunnerEnv(t, []string{"VIRTPOD_QEMU_BINARY=" + missing}, "--name=vm-missing", "--accel=tcg", "--cpus=1", "--memory-mib=128",
		"--kernel=/k", "--root-disk=/d", "--network=none")
	if code, msg := r2.waitExit(t, 20*time.Second); code != runner.ExitProviderMissing || msg != want {
		t.Fatalf("with VIRTPOD_QEMU_BINARY: exit %d, %q", code, msg)
	}
}

func startRunnerEnv(t *testing.T, env []string, args ...string) *runnerProc {
	t.Helper()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // the runner inherits the test's environment; Setenv restores it after
	}
	return startRunner(t, "", args...)
}

// TestKVMFailsFast runs the runner with acceleration kvm on this host. Where KVM cannot run a
// guest (no /dev/kvm at all, or kvm-pvm) it must fail within seconds with the reason; it must
// never hang or fall back to TCG. On a host with hardware KVM the guest boots instead.
func TestKVMFailsFast(t *testing.T) {
	guest := needGuestHost(t)
	probe := kvm.Probe(context.Background(), kvm.Options{})
	t.Logf("kvm probe: %s", probe)
	args := baseArgs(t, guest, "vm-kvm")
	args[1] = "--accel=kvm"
	start := time.Now()
	r := startRunner(t, "", append(args, "--network=none", "--http-addr="+loopback.FreeAddr(t))...)
	if probe.Usable {
		r.waitMarker(t, bootTimeout)
		r.signal(t, syscall.SIGTERM)
		if code, msg := r.waitExit(t, 30*time.Second); code != runner.ExitOK {
			t.Fatalf("hardware KVM: exit %d %q", code, msg)
		}
		return
	}
	code, msg := r.waitExit(t, 15*time.Second)
	took := time.Since(start)
	if code != runner.ExitKVMUnusable || !strings.Contains(msg, "acceleration kvm: KVM cannot run a guest on this node") {
		t.Fatalf("exit %d, termination message %q", code, msg)
	}
	if probe.Absent && !strings.Contains(msg, kvm.DefaultDevice+": no such file or directory") {
		t.Fatalf("no %s here, and the termination message does not say so: %q", kvm.DefaultDevice, msg)
	}
	if took > 10*time.Second {
		t.Fatalf("took %v to fail; want seconds", took)
	}
	if strings.Contains(r.stderr.String(), "-accel\",\"tcg") {
		t.Fatal("the runner fell back to TCG")
	}
	t.Logf("failed in %v: %s", took.Round(time.Millisecond), msg)
}

// TestKVMWithoutProbe skips the probe, leaving the second guards: QEMU's own KVM failure (no
// /dev/kvm at all; or, with -cpu host, kvm-pvm makes QEMU abort) and the boot watchdog (with a CPU
// model QEMU can set up, the kernel hangs after decompression and prints nothing more). Each must
// end in seconds with the KVM exit code.
func TestKVMWithoutProbe(t *testing.T) {
	guest := needGuestHost(t)
	probe := kvm.Probe(context.Background(), kvm.Options{})
	if probe.Usable {
		t.Skip("this host's KVM runs guests; there is nothing for the second guards to catch")
	}
	type guard struct {
		name       string
		extra      []string
		want       string
		minT, maxT time.Duration
	}
	guards := []guard{
		// Some kvm-pvm hosts make QEMU abort on -cpu host, others run it and the guest hangs
		// silently: either way the runner must end in seconds, by QEMU's exit or its watchdog.
		{"cpu-host", []string{"--boot-watchdog=10s"}, "could not start it|the guest kernel printed nothing within 10s", 0, 25 * time.Second},
		{"watchdog", []string{"--cpu-model=qemu64", "--boot-watchdog=10s"}, "the guest kernel printed nothing within 10s", 10 * time.Second, 25 * time.Second},
	}
	if probe.Absent {
		// No KVM device at all: QEMU itself refuses at once, and the runner passes its words on.
		guards = []guard{{"absent", []string{"--boot-watchdog=10s"}, "could not start it: qemu exited before QMP was ready", 0, 10 * time.Second}}
	}
	for _, tc := range guards {
		t.Run(tc.name, func(t *testing.T) {
			args := baseArgs(t, guest, "vm-kvm-"+tc.name)
			args[1] = "--accel=kvm"
			args = append(args, "--network=none", "--http-addr="+loopback.FreeAddr(t), "--skip-kvm-probe")
			start := time.Now()
			r := startRunner(t, "", append(args, tc.extra...)...)
			code, msg := r.waitExit(t, 40*time.Second)
			took := time.Since(start)
			if code != runner.ExitKVMUnusable || !strings.Contains(msg, "KVM could not run the guest") || !containsAny(msg, strings.Split(tc.want, "|")) {
				t.Fatalf("exit %d, termination message %q", code, msg)
			}
			if took < tc.minT || took > tc.maxT {
				t.Fatalf("failed after %v; want between %v and %v", took, tc.minT, tc.maxT)
			}
			t.Logf("failed after %v: %s", took.Round(time.Millisecond), msg)
			t.Logf("guest console: %q", tail(r.stdout.String(), 3))
		})
	}
}

func containsAny(s string, parts []string) bool {
	for _, p := range parts {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// waitProbe runs the exec probe in the pod's namespace, as the kubelet does, until done accepts
// its combined output and error, for at most 30 s; it returns the last run's.
func waitProbe(netns, bin, stateDir string, done func(string, error) bool) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command("ip", "netns", "exec", netns, bin, "probe", "--state-dir="+stateDir).CombinedOutput()
		if done(string(out), err) || time.Now().After(deadline) {
			return string(out), err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// readStatus reads the runner's /status through the exec probe.
func readStatus(t *testing.T, netns, stateDir string) status.Status {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", netns, runnerBinary(t), "probe", "--state-dir="+stateDir, "--path=/status", "--print").Output()
	if err != nil {
		t.Fatalf("runner probe --path=/status: %v", err)
	}
	var st status.Status
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("/status %q: %v", out, err)
	}
	return st
}

// TestStopWhileWaitingForTheAgent: a runner pod deleted before the node agent plumbed its
// network (or while it fills its root volume) stops at once on SIGTERM, as a stop rather than a
// failure, and leaves no socket in its control directory. It used to wait out the pod's grace
// period for the kubelet's SIGKILL, which left netns.sock behind (make soak-node found it).
func TestStopWhileWaitingForTheAgent(t *testing.T) {
	guest := guestFixture(t)
	r := startRunner(t, "", append(baseArgs(t, guest, "vm-unplumbed"), "--network=pod")...)
	sock := filepath.Join(filepath.Dir(r.control), vmv1.NetnsSocketName)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the runner does not wait on %s: %v", sock, err)
		}
	}
	start := time.Now()
	r.signal(t, syscall.SIGTERM)
	code, msg := r.waitExit(t, 10*time.Second)
	if want := "stopped on SIGTERM before the guest started"; code != runner.ExitOK || msg != want {
		t.Fatalf("after SIGTERM: exit %d, %q; want %d, %q", code, msg, runner.ExitOK, want)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("stopped %v after SIGTERM, want at once (the grace period is 20 s)", took)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("%s after the runner stopped: %v", sock, err)
	}
}
