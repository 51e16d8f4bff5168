package e2e

import (
	"bufio"
	"context"
	"fmt"
	"image/color"
	"image/png"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
	"github.com/virtpod/virtpod/tests/rawhttp"
	"github.com/virtpod/virtpod/tests/rfbtest"
)

// TestConsolePortForwardLogs boots one VM and uses it the ways a user does from a laptop, with
// vmctl installed by `make install` (and so also as `kubectl virtpod`):
//
//   - `vmctl logs` shows the boot, and `vmctl logs -f` follows what the console then shows;
//   - `vmctl console`, driven through a real pseudo-terminal, replays the console's history,
//     types a command into the guest's shell and reads its output while a second viewer watches,
//     and detaches on Ctrl-] leaving no console process behind in the pod;
//   - `vmctl port-forward` and `kubectl port-forward pod/<vm>-runner` both fetch the guest's
//     HTTP page (the runner relays declared ports from its loopback to the guest);
//   - `vmctl ssh` runs the ssh client against a forwarded port and passes its exit code on (a
//     stand-in ssh here: the guest fixture has no ssh server).
func TestConsolePortForwardLogs(t *testing.T) {
	parallelSafe(t)
	ctx := context.Background()
	ns := namespace(t)
	const name = "day2"
	if err := kube.Create(ctx, newVM(ns, name)); err != nil {
		t.Fatal(err)
	}
	bin := installVmctl(t)
	vmctl := filepath.Join(bin, "vmctl")
	waitRunning(t, ns, name, 0)
	eventually(t, "guest console marker in the pod's logs", time.Minute, func() error {
		return contains(podLogs(ns, podspec.PodName(name)), marker)
	})

	t.Run("logs", func(t *testing.T) {
		out, err := exec.Command(vmctl, "-n", ns, "logs", name).CombinedOutput()
		if err != nil || contains(string(out), marker, "Linux version") != nil {
			t.Fatalf("vmctl logs: %v\n%s", err, out)
		}
		t.Logf("vmctl logs %s | grep -E 'Linux version|READY':\n%s", name, grepLines(string(out), "Linux version", marker))
		// The same binary as a kubectl plugin.
		cmd := exec.Command(kubectl, "virtpod", "-n", ns, "logs", "--tail", "3", name)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		if out, err := cmd.CombinedOutput(); err != nil || strings.Count(string(out), "\n") != 3 {
			t.Fatalf("kubectl virtpod logs --tail 3: %v\n%s", err, out)
		}
	})

	t.Run("console", func(t *testing.T) {
		a := startPTY(t, vmctl, "-n", ns, "console", name)
		b := startPTY(t, vmctl, "-n", ns, "console", name)
		for who, c := range map[string]*ptyProc{"first": a, "second": b} {
			// The banner, then the console's history: the boot is on screen at once.
			// "Command line:" is one of the kernel's first lines: none of the boot is lost.
			if err := c.waitFor(time.Minute, "Connected to the console of VM "+ns+"/"+name, "Command line:", marker); err != nil {
				t.Fatalf("%s viewer: %v", who, err)
			}
		}
		// `vmctl logs -f` follows the same output.
		follow := exec.Command(vmctl, "-n", ns, "logs", "-f", "--tail", "1", name)
		var followed strings.Builder
		var followMu sync.Mutex
		follow.Stdout = writerFunc(func(b []byte) (int, error) {
			followMu.Lock()
			defer followMu.Unlock()
			return followed.Write(b)
		})
		if err := follow.Start(); err != nil {
			t.Fatal(err)
		}
		followDone := make(chan error, 1)
		go func() { followDone <- follow.Wait() }()
		t.Cleanup(func() { _ = follow.Process.Kill() })
		// Type only once the stream is open (its --tail line arrived): a line logged before
		// that is not followed, it is history.
		eventually(t, "vmctl logs -f streaming", 30*time.Second, func() error {
			followMu.Lock()
			defer followMu.Unlock()
			if followed.Len() == 0 {
				return fmt.Errorf("nothing yet")
			}
			return nil
		})
		// Enter is \r in a raw terminal; the guest's tty turns it into a newline.
		const want = "VIRTPOD-E2E-42"
		deadline := time.Now().Add(time.Minute)
		for {
			a.write(t, "echo VIRTPOD-E2E-$((6*7)); uname -n\r")
			if a.waitFor(3*time.Second, want) == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the guest's shell never answered:\n%s", a.screen())
			}
		}
		if err := b.waitFor(10*time.Second, want); err != nil {
			t.Fatalf("the second viewer did not see the first one's command: %v", err)
		}
		t.Logf("vmctl console %s (a pseudo-terminal):\n%s", name, a.screen())
		eventually(t, "the command's output in vmctl logs -f", 30*time.Second, func() error {
			followMu.Lock()
			defer followMu.Unlock()
			return contains(followed.String(), want)
		})
		_ = follow.Process.Signal(syscall.SIGINT)
		select {
		case err := <-followDone:
			if err != nil {
				t.Fatalf("vmctl logs -f after Ctrl-C: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("vmctl logs -f did not end on Ctrl-C")
		}
		for who, c := range map[string]*ptyProc{"first": a, "second": b} {
			c.write(t, "\x1d") // Ctrl-]
			code, err := c.wait(15 * time.Second)
			if err != nil || code != 0 {
				t.Fatalf("%s viewer after Ctrl-]: exit %d, %v\n%s", who, code, err, c.screen())
			}
			if err := c.waitFor(time.Second, "Detached from the console of VM "+ns+"/"+name); err != nil {
				t.Fatal(err)
			}
		}
		// Detaching ended the console command in the runner's container too.
		eventually(t, "no virtpod-runner console left in the pod", 30*time.Second, func() error {
			if pids := consoleProcs(); len(pids) > 0 {
				return fmt.Errorf("virtpod-runner console still running: pids %v", pids)
			}
			return nil
		})
	})

	t.Run("vmctl port-forward", func(t *testing.T) {
		body := forwardAndGet(t, []string{vmctl, "-n", ns, "port-forward", name, ":80"})
		if err := contains(body, "virtpod guest "+name); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("kubectl port-forward", func(t *testing.T) {
		body := forwardAndGet(t, []string{kubectl, "-n", ns, "port-forward", "pod/" + podspec.PodName(name), ":80"})
		if err := contains(body, "virtpod guest "+name); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ssh", func(t *testing.T) {
		// A stand-in ssh: it records its arguments, fetches the page at the forwarded port
		// (80 here, declared, as --port), and exits 7, which vmctl must pass on.
		dir := t.TempDir()
		argsFile := filepath.Join(dir, "args")
		stub := "#!/bin/bash\nprintf '%s\\n' \"$@\" >" + argsFile + "\n" +
			"exec 3<>/dev/tcp/127.0.0.1/$2 && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3\nexit 7\n"
		if err := os.WriteFile(filepath.Join(dir, "ssh"), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(vmctl, "-n", ns, "ssh", name, "--port", "80", "--user", "debian", "--", "uname", "-a")
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		out, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != 7 || contains(string(out), "virtpod guest "+name) != nil {
			t.Fatalf("vmctl ssh: exit %d, want ssh's 7 and the page through the forward:\n%s", cmd.ProcessState.ExitCode(), out)
		}
		args, _ := os.ReadFile(argsFile)
		if got := strings.Fields(string(args)); strings.Join(got[2:], " ") != "-o HostKeyAlias="+name+"."+ns+" -l debian localhost uname -a" || got[0] != "-p" {
			t.Fatalf("ssh ran with %q", got)
		}
	})

	t.Run("screenshot", func(t *testing.T) {
		// The guest's screen (a display by default) as a PNG through the pod's exec.
		file := filepath.Join(t.TempDir(), name+".png")
		out, err := exec.Command(vmctl, "-n", ns, "screenshot", name, "-o", file).CombinedOutput()
		if err != nil {
			t.Fatalf("vmctl screenshot: %v\n%s", err, out)
		}
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		img, err := png.Decode(f)
		if err != nil {
			t.Fatalf("the screenshot is no PNG: %v", err)
		}
		colours := map[color.RGBA]bool{}
		b := img.Bounds()
		for y := b.Min.Y; y < b.Max.Y && len(colours) < 2; y += 4 {
			for x := b.Min.X; x < b.Max.X && len(colours) < 2; x += 4 {
				colours[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)] = true
			}
		}
		if len(colours) < 2 {
			t.Errorf("the screenshot (%v) is blank", b)
		}
		t.Logf("vmctl screenshot: %s", strings.TrimSpace(string(out)))
	})

	t.Run("vnc", func(t *testing.T) {
		// vmctl vnc serves the display on a local port: a VNC client's RFB session reaches a
		// framebuffer update of the screen, through the pod's exec only.
		cmd := exec.Command(vmctl, "-n", ns, "vnc", name)
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		line, err := bufio.NewReader(stderr).ReadString('\n')
		m := regexp.MustCompile(` is at (\S+): `).FindStringSubmatch(line)
		if err != nil || m == nil {
			t.Fatalf("vmctl vnc said %q, %v", line, err)
		}
		conn, err := net.DialTimeout("tcp", m[1], 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		w, h, desktop, err := rfbtest.Handshake(conn, conn)
		if err != nil || w == 0 || h == 0 {
			t.Fatalf("RFB through vmctl vnc: %dx%d %q, %v", w, h, desktop, err)
		}
		t.Logf("vmctl vnc: %s; RFB 3.8 to a framebuffer update of %dx%d, desktop %q", strings.TrimSpace(line), w, h, desktop)
	})

	t.Run("top", func(t *testing.T) {
		// vmctl top reads the node agents' per-VM metrics through the API server: the VM is
		// listed with its memory, and -A lists every VM that ran throughout the measure.
		var out string
		eventually(t, "vmctl top -A lists every running VM", 2*time.Minute, func() error {
			before := runningVMs(t)
			o, err := exec.Command(vmctl, "top", "-A", "--interval", "2s").CombinedOutput()
			if err != nil {
				return fmt.Errorf("vmctl top -A: %v\n%s", err, o)
			}
			listed := map[string]bool{}
			for _, line := range strings.Split(string(o), "\n")[1:] {
				if f := strings.Fields(line); len(f) == 8 {
					listed[f[0]+"/"+f[1]] = true
				}
			}
			after := runningVMs(t)
			for vm := range before {
				if after[vm] && !listed[vm] {
					return fmt.Errorf("VM %s ran throughout and is not listed:\n%s", vm, o)
				}
			}
			if !listed[ns+"/"+name] {
				return fmt.Errorf("VM %s/%s not listed:\n%s", ns, name, o)
			}
			out = string(o)
			return nil
		})
		t.Logf("vmctl top -A:\n%s", out)
		o, err := exec.Command(vmctl, "-n", ns, "top", name).CombinedOutput()
		lines := strings.Split(strings.TrimSpace(string(o)), "\n")
		if err != nil || len(lines) != 2 || !strings.HasPrefix(lines[1], name+" ") || contains(lines[1], "256Mi") != nil {
			t.Fatalf("vmctl top %s: %v, want its one row with 256Mi of memory:\n%s", name, err, o)
		}
	})
}

// runningVMs are the cluster's VMs in phase Running, as namespace/name.
func runningVMs(t *testing.T) map[string]bool {
	t.Helper()
	var vms vmv1.VirtualMachineList
	if err := kube.List(context.Background(), &vms); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, vm := range vms.Items {
		if vm.Status.Phase == vmv1.PhaseRunning {
			out[vm.Namespace+"/"+vm.Name] = true
		}
	}
	return out
}

// installMu serializes installVmctl: two tests may install at once, into the build's shared
// folders.
var installMu sync.Mutex

// installVmctl runs `make install` into a temporary prefix and returns its bin directory.
func installVmctl(t *testing.T) string {
	t.Helper()
	installMu.Lock()
	defer installMu.Unlock()
	prefix := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "install", "PREFIX="+prefix)
	cmd.Dir = kubeapi.Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	bin := filepath.Join(prefix, "bin")
	for _, f := range []string{"vmctl", "kubectl-virtpod"} {
		if _, err := os.Stat(filepath.Join(bin, f)); err != nil {
			t.Fatalf("make install left no %s: %v", f, err)
		}
	}
	return bin
}

// forwardAndGet runs a port-forward command with a free local port, fetches / through it and
// stops it with Ctrl-C, which must end it cleanly.
func forwardAndGet(t *testing.T, argv []string) string {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var out strings.Builder
	port := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 80`)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case port <- m[1]:
				default:
				}
			}
		}
	}()
	var p string
	select {
	case p = <-port:
	case err := <-exited:
		t.Fatalf("%s ended: %v\n%s", strings.Join(argv, " "), err, out.String())
	case <-time.After(time.Minute):
		t.Fatalf("%s: no 'Forwarding from' line within a minute", strings.Join(argv, " "))
	}
	var body string
	eventually(t, "HTTP through "+filepath.Base(argv[0])+" port-forward", time.Minute, func() error {
		var err error
		body, err = rawhttp.Get("127.0.0.1:" + p)
		return err
	})
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not end on Ctrl-C", strings.Join(argv, " "))
	}
	t.Logf("%s, then a GET through it:\n%s%s", strings.Join(argv[1:], " "), out.String(), body)
	return body
}

// ptyProc is a command on a pseudo-terminal, as a user's shell runs it.
type ptyProc struct {
	cmd    *exec.Cmd
	tty    *os.File
	mu     sync.Mutex
	out    strings.Builder
	exited chan struct{}
	code   int
}

func startPTY(t *testing.T, argv ...string) *ptyProc {
	t.Helper()
	p := &ptyProc{cmd: exec.Command(argv[0], argv[1:]...), exited: make(chan struct{})}
	f, err := pty.StartWithSize(p.cmd, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	p.tty = f
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		f.Close()
	})
	return p
}

func (p *ptyProc) screen() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *ptyProc) write(t *testing.T, s string) {
	t.Helper()
	if _, err := p.tty.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func (p *ptyProc) waitFor(d time.Duration, want ...string) error {
	end := time.Now().Add(d)
	for {
		if contains(p.screen(), want...) == nil {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("%q not on the terminal within %v:\n%s", want, d, p.screen())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *ptyProc) wait(d time.Duration) (int, error) {
	select {
	case <-p.exited:
		return p.code, nil
	case <-time.After(d):
		return 0, fmt.Errorf("still running after %v", d)
	}
}

// consoleProcs lists the node's `virtpod-runner console` processes (the test runs on the node).
func consoleProcs() []int {
	return processes(func(args []string) bool {
		return len(args) > 1 && strings.HasSuffix(args[0], "virtpod-runner") && args[1] == "console"
	})
}

// grepLines returns the lines of s that contain any of parts.
func grepLines(s string, parts ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, p := range parts {
			if strings.Contains(l, p) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// writerFunc is an io.Writer made of a function.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
