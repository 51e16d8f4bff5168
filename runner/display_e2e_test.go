package runner_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner/hypervisor"
	"github.com/virtpod/virtpod/tests/rfbtest"
)

// statsDisk is the data disk the guest writes for the stats check: a blank disk without a
// filesystem, which nothing but that write touches.
const statsDisk = "stats"

// displayArgs give a guest a display and the stats check's disk, in a directory of the runner's
// user (as an emptyDir is).
func displayArgs(t *testing.T) []string {
	return []string{"--display=vnc", "--disk=name=" + statsDisk + ",kind=empty,path=" + runnerDir(t) + ",size-mib=16"}
}

// checkDisplay: the guest booted with --display=vnc shows its screen three ways, all through
// unix sockets in the pod: `virtpod-runner screenshot` (GET /v1/screenshot) gives a PNG of
// something (not one colour), `virtpod-runner vnc` carries a VNC client's RFB 3.8 session to
// QEMU up to a framebuffer update of the same size, and QEMU's argv names its VNC display on
// the state directory's socket while QEMU listens on no TCP port.
func checkDisplay(t *testing.T, r *runnerProc, netns string) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", netns, runnerBinary(t), "screenshot", "--control-socket="+r.control).Output()
	if err != nil {
		t.Fatalf("virtpod-runner screenshot: %v %s", err, exitStderr(err))
	}
	img, err := png.Decode(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("the screenshot (%d bytes) is no PNG: %v", len(out), err)
	}
	if colours := countColours(img, 2); colours < 2 {
		t.Errorf("the screenshot (%v) is one colour", img.Bounds())
	}
	w, h, name := vncSession(t, netns, r.stateDir)
	if w != img.Bounds().Dx() || h != img.Bounds().Dy() || !strings.Contains(name, "vm-e2e") {
		t.Errorf("VNC's ServerInit: %dx%d %q; want the screenshot's %v and the guest's name", w, h, name, img.Bounds().Size())
	}
	t.Logf("screen %dx%d (%d bytes of PNG), VNC desktop %q", w, h, len(out), name)

	proc, argv := qemuArgv(t, r)
	vnc := slices.Index(argv, "-vnc")
	if vnc < 0 || argv[vnc+1] != "unix:"+hypervisor.VNCSocket(r.stateDir) || slices.Index(argv[vnc+1:], "-vnc") >= 0 {
		t.Errorf("QEMU's VNC display is not only the state directory's socket: %q", argv)
	}
	if l := tcpListeners(t, proc); len(l) > 0 {
		t.Errorf("QEMU listens on TCP: %v", l)
	}
}

// qemuArgv is the /proc directory and argv of the runner's QEMU, by its argv: QEMU 10.0 runs
// through its tree's loader, whose name its process has.
func qemuArgv(t *testing.T, r *runnerProc) (string, []string) {
	t.Helper()
	for _, pid := range r.children() {
		proc := fmt.Sprintf("/proc/%d", pid)
		argv := strings.Split(strings.TrimRight(readFile(filepath.Join(proc, "cmdline")), "\x00"), "\x00")
		if slices.ContainsFunc(argv, func(a string) bool { return strings.HasSuffix(a, "qemu-system-x86_64") }) {
			return proc, argv
		}
	}
	t.Fatalf("no QEMU under runner %d", r.cmd.Process.Pid)
	return "", nil
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// countColours counts the colours of img, stopping at enough.
func countColours(img image.Image, enough int) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			if seen[[4]uint32{r, g, bl, a}] = true; len(seen) >= enough {
				return len(seen)
			}
		}
	}
	return len(seen)
}

// vncSession is a minimal VNC client over `virtpod-runner vnc` in the pod (what `vmctl vnc`
// bridges a local port to): RFB 3.8's ProtocolVersion, security type None, ClientInit and
// ServerInit, then one FramebufferUpdateRequest of the whole screen and the FramebufferUpdate
// that answers it. It returns ServerInit's size and desktop name.
func vncSession(t *testing.T, netns, stateDir string) (int, int, string) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", netns, runnerBinary(t), "vnc", "--state-dir="+stateDir)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	w, h, name, err := rfbtest.Handshake(in, out)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("RFB over virtpod-runner vnc: %v (stderr %q)", err, stderr.String())
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("virtpod-runner vnc after its stdin closed: %v %s", err, stderr.String())
	}
	return w, h, name
}

// tcpListeners are the TCP sockets the process at proc listens on (in its network namespace).
func tcpListeners(t *testing.T, proc string) []string {
	t.Helper()
	inodes := map[string]bool{}
	fds, _ := filepath.Glob(filepath.Join(proc, "fd", "*"))
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, table := range []string{"tcp", "tcp6"} {
		for _, line := range strings.Split(readFile(filepath.Join(proc, "net", table)), "\n")[1:] {
			// sl local_address rem_address st ... inode: state 0A is LISTEN.
			if f := strings.Fields(line); len(f) > 9 && f[3] == "0A" && inodes[f[9]] {
				out = append(out, table+" "+f[1])
			}
		}
	}
	return out
}

// checkStats: GET /v1/stats of the running guest. The guest writes statsN bytes to its stats
// disk with O_DIRECT (typed into its console), and the disk's WriteBytes grows by at least that
// and by at most 5% more plus 64 KiB: the disk has no filesystem and nothing else writes to
// it, so the block layer should count exactly the writes dd made; the margin only absorbs a
// request split or repeated, none expected. The guest then serves a 256 KiB file from its web
// share at the pod IP: its transmit (the tap's receive) grows by at least that, its receive
// by far less. CPU time is positive and within what the host's CPUs could give since the
// start; memory is the guest's 256 MiB.
func checkStats(t *testing.T, r *runnerProc, netns, podIP, web string, started time.Time) {
	t.Helper()
	const statsN = 4 << 20
	c := controlOf(r)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before, err := c.Stats(ctx)
	if err != nil {
		t.Fatalf("GET /v1/stats: %+v, %v", before, err)
	}
	guestShell(t, netns, r.stateDir, "for d in /sys/block/vd*; do [ \"$(/bin/busybox cat $d/serial)\" = "+statsDisk+" ] && "+
		"/bin/busybox dd if=/dev/zero of=/dev/${d##*/} bs=64k count=64 oflag=direct conv=fsync 2>/dev/null && echo VIRTPOD-DD-$((6*7)); done",
		"VIRTPOD-DD-42")
	writeFile(t, filepath.Join(web, "big.html"), strings.Repeat("0123456789abcdef", 16<<10))
	if body, err := httpGet(ctx, "http://"+podIP+"/dev/big.html"); err != nil || len(body) != 256<<10 {
		t.Fatalf("the guest served %d bytes of big.html, %v", len(body), err)
	}
	after, err := c.Stats(ctx)
	if err != nil {
		t.Fatalf("GET /v1/stats: %+v, %v", after, err)
	}
	for _, st := range []controlapi.Stats{before, after} {
		t.Logf("stats: cpu %.2f s, memory %d, disks %+v, network %+v", st.CPUSeconds, st.MemoryBytes, st.Disks, st.Network)
	}
	wrote := disk(after, "disk-"+statsDisk).WriteBytes - disk(before, "disk-"+statsDisk).WriteBytes
	if wrote < statsN || wrote > statsN+statsN/20+64<<10 {
		t.Errorf("the stats disk's WriteBytes grew by %d for the guest's %d bytes", wrote, statsN)
	}
	if d := after.Disks; len(d) != 2 || d[0].Drive != "root" || d[0].ReadBytes == 0 || d[1].Drive != "disk-"+statsDisk {
		t.Errorf("disks %+v, want root (read at boot) and disk-%s", d, statsDisk)
	}
	if cpu := after.CPUSeconds; cpu <= 0 || cpu < before.CPUSeconds || cpu > time.Since(started).Seconds()*float64(runtime.NumCPU()) {
		t.Errorf("CPU seconds %.2f (before %.2f), want positive, growing, within the host's CPUs since the start", cpu, before.CPUSeconds)
	}
	if after.MemoryBytes != 256<<20 {
		t.Errorf("memory %d bytes, want the guest's 256 MiB", after.MemoryBytes)
	}
	if before.Network == nil || after.Network == nil {
		t.Fatalf("no network counters: %+v, %+v", before.Network, after.Network)
	}
	tx, rx := after.Network.TxBytes-before.Network.TxBytes, after.Network.RxBytes-before.Network.RxBytes
	if tx < 256<<10 || rx > tx/4 || after.Network.TxPackets <= before.Network.TxPackets {
		t.Errorf("serving 256 KiB, the guest transmitted %d bytes and received %d: want its transmit at least that, its receive far less", tx, rx)
	}
	t.Logf("the stats disk's WriteBytes grew by %d for %d written; the guest sent %d bytes and received %d serving 256 KiB; CPU %.2f s", wrote, statsN, tx, rx, after.CPUSeconds)
}

func disk(st controlapi.Stats, drive string) controlapi.DiskStats {
	for _, d := range st.Disks {
		if d.Drive == drive {
			return d
		}
	}
	return controlapi.DiskStats{}
}

// guestShell types cmd into the guest's console shell, once the shell answers, and waits for
// want in what it prints.
func guestShell(t *testing.T, netns, stateDir, cmd, want string) {
	t.Helper()
	con := attachConsole(t, netns, runnerBinary(t), stateDir)
	for deadline := time.Now().Add(60 * time.Second); ; {
		if _, err := io.WriteString(con.in, "echo VIRTPOD-SHELL-$((6*7))\n"); err != nil {
			t.Fatalf("virtpod-runner console ended (%v, %v); it printed %q", err, con.close(time.Second), con.out.String())
		}
		if con.waitFor("VIRTPOD-SHELL-42", 3*time.Second) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest's shell never answered on the console:\n%s", tail(con.out.String(), 20))
		}
	}
	con.write(t, cmd+"\n")
	if err := con.waitFor(want, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := con.close(10 * time.Second); err != nil {
		t.Errorf("console client: %v", err)
	}
}
