package runner_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/pkg/network/guestnet"
	"github.com/virtpod/virtpod/runner"
	"github.com/virtpod/virtpod/tests/netcapture"
	"github.com/virtpod/virtpod/tests/rawhttp"
)

// TestConsoleAndPortRelay boots one guest in a namespace standing in for the pod, with port 80
// declared, and uses it the ways `vmctl console` and `kubectl port-forward` do:
//
//   - `virtpod-runner console`, run in the pod's namespace, first replays the console's history
//     (the boot), then types a command into the guest's shell and reads its output, while a
//     second client attached at the same time sees the same output;
//   - an HTTP GET to 127.0.0.1:80 in the pod's namespace reaches the guest's httpd through the
//     runner's relay, without a frame of it on the pod network, while the guest still serves at
//     the pod IP from the host side; 127.0.0.1:8080 (the runner's old status port) is free.
//
// The pod network is a hairpin bridge, as the bridge CNI plugin's: the guest's replies to the
// relay go through its gateway's MAC, which it resolves through that bridge.
func TestConsoleAndPortRelay(t *testing.T) {
	guest := needGuestHost(t)
	ns := newPodNetns(t, 5)
	// The bridge CNI plugin with hairpinMode returns the pod's broadcasts to it.
	ns.onNodeBridge(t, true)
	r := startRunner(t, ns.name, append(baseArgs(t, guest, "vm-console"), "--network=pod", "--resolv-conf="+ns.resolvConf, "--port=http:80/TCP")...)
	r.waitMarker(t, bootTimeout)
	bin := runnerBinary(t)

	t.Run("console", func(t *testing.T) {
		a := attachConsole(t, ns.name, bin, r.stateDir)
		b := attachConsole(t, ns.name, bin, r.stateDir)
		for name, c := range map[string]*consoleClient{"first": a, "second": b} {
			if err := c.waitFor(marker, 10*time.Second); err != nil {
				t.Fatalf("%s client: no history replayed on attach: %v", name, err)
			}
		}
		// A one-CPU guest's init scans CPUs that have an online file; cpu0 has none, and the
		// scan once said so on the console ("cat: can't open").
		if out := a.out.String(); strings.Contains(out, "can't open") {
			t.Errorf("the guest's boot printed an error:\n%s", out)
		}
		// The shell may still be starting: type until it answers. $((6*7)) tells the shell's
		// answer from the echo of what was typed.
		const want = "VIRTPOD-CONSOLE-42"
		deadline := time.Now().Add(60 * time.Second)
		for {
			a.write(t, "echo VIRTPOD-CONSOLE-$((6*7)); uname -n\n")
			if a.waitFor(want, 3*time.Second) == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the guest's shell never answered on the console:\n%s", tail(a.out.String(), 20))
			}
		}
		if err := a.waitFor("vm-console", 5*time.Second); err != nil {
			t.Fatalf("uname -n: %v", err)
		}
		if err := b.waitFor(want, 5*time.Second); err != nil {
			t.Fatalf("the second client did not see the first one's command: %v", err)
		}
		t.Logf("console:\n%s", tail(a.out.String(), 4))
		// Closing stdin ends the client, with exit 0.
		for name, c := range map[string]*consoleClient{"first": a, "second": b} {
			if err := c.close(10 * time.Second); err != nil {
				t.Errorf("%s client after stdin closed: %v", name, err)
			}
		}
	})

	t.Run("relay", func(t *testing.T) {
		capture, err := netcapture.Open(ns.hostIf)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(capture)
		var body string
		err = inNetns(ns.name, func() error {
			var err error
			for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				if body, err = rawhttp.Get("127.0.0.1:80"); err == nil || time.Now().After(end) {
					break
				}
			}
			if err != nil {
				return err
			}
			// Nothing else of the runner's is on a TCP port a guest could want.
			if c, err := net.DialTimeout("tcp", "127.0.0.1:8080", time.Second); err == nil {
				c.Close()
				return errors.New("something listens on 127.0.0.1:8080 in the pod's namespace")
			}
			return nil
		})
		if err != nil {
			t.Fatalf("guest HTTP through the relay on the pod's loopback: %v", err)
		}
		if !strings.Contains(body, "virtpod guest vm-console") {
			t.Fatalf("relay answered %q, want the guest's page", body)
		}
		for _, f := range netcapture.Read(capture, 300*time.Millisecond) {
			if bytes.Contains(f, guestnet.RelayIP) {
				t.Errorf("a frame naming the relay address %s reached the pod network: % x", guestnet.RelayIP, f)
			}
		}
		// The pod IP is still the guest's, seen from outside the pod.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if body, err := httpGet(ctx, "http://"+ns.podIP+"/"); err != nil || !strings.Contains(body, "virtpod guest vm-console") {
			t.Fatalf("guest HTTP at the pod IP from the host side: %q, %v", body, err)
		}
	})

	// The status endpoint on its unix socket, through the exec probe.
	if out, err := exec.Command("ip", "netns", "exec", ns.name, bin, "probe", "--state-dir="+r.stateDir).CombinedOutput(); err != nil {
		t.Fatalf("runner probe: %v %s", err, out)
	}
	r.signal(t, syscall.SIGTERM)
	if code, msg := r.waitExit(t, 30*time.Second); code != runner.ExitOK {
		t.Fatalf("after SIGTERM: exit %d, %q", code, msg)
	}
}

// consoleClient is a running `virtpod-runner console`.
type consoleClient struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  lockedBuffer
	done chan error
}

func attachConsole(t *testing.T, netnsName, bin, stateDir string) *consoleClient {
	t.Helper()
	c := &consoleClient{cmd: exec.Command("ip", "netns", "exec", netnsName, bin, "console", "--state-dir="+stateDir), done: make(chan error, 1)}
	c.cmd.Stdout = &c.out
	c.cmd.Stderr = &c.out
	var err error
	if c.in, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = c.cmd.Process.Kill()
		}
	})
	return c
}

func (c *consoleClient) write(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(c.in, s); err != nil {
		t.Fatal(err)
	}
}

func (c *consoleClient) waitFor(s string, d time.Duration) error {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if strings.Contains(c.out.String(), s) {
			return nil
		}
	}
	return fmt.Errorf("%q not on the console within %v:\n%s", s, d, tail(c.out.String(), 10))
}

// close closes stdin and waits for the client to exit.
func (c *consoleClient) close(d time.Duration) error {
	c.in.Close()
	select {
	case err := <-c.done:
		return err
	case <-time.After(d):
		return fmt.Errorf("still attached %v after stdin closed", d)
	}
}

// inNetns runs f on a thread in the named network namespace; sockets f opens live there.
func inNetns(name string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is never given back to the scheduler: it dies with the goroutine.
		runtime.LockOSThread()
		h, err := netns.GetFromName(name)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}
