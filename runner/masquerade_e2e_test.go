package runner_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtpod/virtpod/pkg/network/guestnet"
	"github.com/virtpod/virtpod/runner"
	"github.com/virtpod/virtpod/tests/rawhttp"
)

// readOnlyProcSys runs its arguments in a mount namespace of their own in which /proc/sys is
// read-only, as runc mounts it in every container.
var readOnlyProcSys = []string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
	`mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && exec "$@"`, "sh"}

// TestMasqueradeNetwork boots the guest once with --network=masquerade in a pod-like namespace
// whose IPv4 forwarding is off and whose /proc/sys the runner sees read-only, as in a container:
//
//   - the guest comes up at the fixed 10.0.2.2 (ip=) with the MAC derived from the VM's name;
//   - from outside the pod, the pod IP's declared port 80 reaches the guest's httpd (DNAT, and
//     the forwarding the runner switched on per interface through netlink);
//   - the guest fetches a page from a server on the node side, which sees the POD IP as the
//     source (masquerade);
//   - another pod that routes 10.0.2.2 through this pod reaches nothing: only the DNAT leads in;
//   - the runner reaches the guest itself: the port relay on the pod's loopback and the
//     readiness probe pass;
//   - SIGTERM powers the guest off as in pod mode.
//
// The pod is dual-stack: all of it holds for IPv6 too (the guest at fd10:0:2::2 from the
// runner's DHCPv6, NAT66 to the pod's IPv6 address), with IPv6 forwarding switched on in the
// namespace.
func TestMasqueradeNetwork(t *testing.T) {
	guest := needGuestHost(t)
	need(t, haveBinary("unshare") && haveBinary("mount"), "needs util-linux (unshare, mount)")
	const name = "vm-masq"
	ns := newPodNetns(t, 27)
	ns.dualStack(t, 27)
	br := ns.onNodeBridge(t, false)
	// The namespace copied the host's forwarding setting; a pod's need not have it. Off for every
	// interface, also those the runner creates.
	run(t, "ip", "netns", "exec", ns.name, "sh", "-c", "echo 0 >/proc/sys/net/ipv4/conf/all/forwarding; echo 0 >/proc/sys/net/ipv6/conf/all/forwarding")
	if got := forwarding(t, ns.name, "eth0"); got != "0" {
		t.Fatalf("eth0 forwarding %q before the runner, want 0", got)
	}

	// Another pod on the node's bridge, which sends what it has for 10.0.2.2 to this pod.
	other := fmt.Sprintf("vpt-%d-27o", os.Getpid())
	otherIf := fmt.Sprintf("vpt27o%d", os.Getpid()%10000)
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", other).Run()
		_ = exec.Command("ip", "link", "del", otherIf).Run()
	})
	run(t, "ip", "netns", "add", other)
	run(t, "ip", "link", "add", otherIf, "type", "veth", "peer", "name", "eth0", "netns", other)
	run(t, "ip", "link", "set", otherIf, "master", br)
	run(t, "ip", "link", "set", otherIf, "up")
	run(t, "ip", "-n", other, "addr", "add", "10.213.27.3/24", "dev", "eth0")
	run(t, "ip", "-n", other, "link", "set", "eth0", "up")
	run(t, "ip", "-n", other, "route", "add", guestnet.MasqueradeGuestIP.String()+"/32", "via", ns.podIP)
	run(t, "ip", "-n", other, "addr", "add", "fd00:213:27::3/64", "dev", "eth0", "nodad")
	run(t, "ip", "-n", other, "route", "add", guestnet.MasqueradeGuestIP6.String()+"/128", "via", ns.podIP6)

	// The node-side server the guest fetches from; it notes who asked.
	seen := make(chan string, 4)
	l, err := net.Listen("tcp", ns.gwIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	l6, err := net.Listen("tcp", "["+ns.gwIP6+"]:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		select {
		case seen <- host:
		default:
		}
		io.WriteString(w, "VIRTPOD-NODE-SIDE\n")
	})}
	go srv.Serve(l)
	go srv.Serve(l6)
	t.Cleanup(func() { srv.Close() })

	r := startRunnerVia(t, ns.name, readOnlyProcSys, append(baseArgs(t, guest, name), "--network=masquerade", "--resolv-conf="+ns.resolvConf,
		"--port=http:80/TCP", "--readiness-probe=http:80/")...)
	r.waitMarker(t, bootTimeout)
	if mi := readFile(fmt.Sprintf("/proc/%d/mountinfo", r.cmd.Process.Pid)); !procSysReadOnly(mi) {
		t.Fatalf("/proc/sys is not read-only for the runner:\n%s", mi)
	}
	if !strings.Contains(r.stdout.String(), "ip=10.0.2.2 host="+name) {
		t.Fatalf("the guest did not come up at 10.0.2.2 from ip=:\n%s", tail(r.stdout.String(), 5))
	}
	for _, dev := range []string{"eth0", guestnet.DefaultBridge} {
		if got := forwarding(t, ns.name, dev); got != "1" {
			t.Errorf("%s forwarding %q with the runner up, want 1", dev, got)
		}
	}
	// IPv6: the guest takes the masquerade network's address from the runner's DHCPv6, with
	// the pod's IPv6 nameserver; the namespace forwards IPv6 (the agent's write to /proc/sys).
	want6 := "VIRTPOD-GUEST-IPV6 " + guestnet.MasqueradeGuestIP6.String() + " dns=" + ns.gwIP6
	for deadline := time.Now().Add(90 * time.Second); !strings.Contains(r.stdout.String(), want6); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the guest did not take IPv6 (%q missing):\n%s", want6, tail(r.stdout.String(), 10))
		}
	}
	if got := strings.TrimSpace(run(t, "ip", "netns", "exec", ns.name, "cat", "/proc/sys/net/ipv6/conf/all/forwarding")); got != "1" {
		t.Errorf("IPv6 forwarding %q with the runner up, want 1", got)
	}

	t.Run("port at the pod IP from outside", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, ip := range []string{ns.podIP, "[" + ns.podIP6 + "]"} {
			body, err := httpGet(ctx, "http://"+ip+"/")
			if err != nil || !strings.Contains(body, "virtpod guest "+name) {
				t.Fatalf("guest HTTP at the pod IP %s from the node side: %q, %v", ip, body, err)
			}
		}
	})

	t.Run("guest out as the pod IP", func(t *testing.T) {
		c := attachConsole(t, ns.name, runnerBinary(t), r.stateDir)
		defer c.close(10 * time.Second)
		for i, srv := range []struct{ addr, podIP string }{{l.Addr().String(), ns.podIP}, {l6.Addr().String(), ns.podIP6}} {
			url := "http://" + srv.addr + "/from-guest"
			done := fmt.Sprintf("VIRTPOD-WGET-%d", 42+i)
			deadline := time.Now().Add(60 * time.Second)
			for {
				// timeout, not wget -T: the fixture's busybox 1.35 wget segfaults on -T.
				c.write(t, fmt.Sprintf("timeout 10 wget -O - %s; echo VIRTPOD-WGET-$((%d+%d))\n", url, 42, i))
				if c.waitFor(done, 10*time.Second) == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the guest's shell never answered:\n%s", tail(c.out.String(), 20))
				}
			}
			select {
			case src := <-seen:
				if src != srv.podIP {
					t.Fatalf("the node-side server saw the guest as %s, want the pod IP %s", src, srv.podIP)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("the guest's request to %s never reached the node side:\n%s", url, tail(c.out.String(), 10))
			}
			if err := c.waitFor("VIRTPOD-NODE-SIDE", 5*time.Second); err != nil {
				t.Fatalf("the guest did not get the answer: %v", err)
			}
		}
	})

	t.Run("nothing but the DNAT leads in", func(t *testing.T) {
		err := inNetns(other, func() error {
			if body, err := rawhttp.Get(ns.podIP + ":80"); err != nil || !strings.Contains(body, "virtpod guest "+name) {
				return fmt.Errorf("the other pod cannot reach the guest at the pod IP: %q, %v", body, err)
			}
			if body, err := rawhttp.Get("[" + ns.podIP6 + "]:80"); err != nil || !strings.Contains(body, "virtpod guest "+name) {
				return fmt.Errorf("the other pod cannot reach the guest at the pod's IPv6 address: %q, %v", body, err)
			}
			for _, guest := range []net.IP{guestnet.MasqueradeGuestIP, guestnet.MasqueradeGuestIP6} {
				c, err := net.DialTimeout("tcp", net.JoinHostPort(guest.String(), "80"), 3*time.Second)
				if err == nil {
					c.Close()
					return fmt.Errorf("the other pod connected to %s:80 directly, around the DNAT", guest)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the runner reaches the guest", func(t *testing.T) {
		err := inNetns(ns.name, func() error {
			body, err := rawhttp.Get("127.0.0.1:80")
			if err == nil && !strings.Contains(body, "virtpod guest "+name) {
				err = fmt.Errorf("answered %q", body)
			}
			return err
		})
		if err != nil {
			t.Fatalf("guest HTTP through the relay on the pod's loopback: %v", err)
		}
		if out, err := waitProbe(ns.name, runnerBinary(t), r.stateDir, func(_ string, err error) bool { return err == nil }); err != nil {
			t.Fatalf("runner probe: %v %s", err, out)
		}
		if p := readStatus(t, ns.name, r.stateDir).ReadinessProbe; p == nil || !p.Passed {
			t.Fatalf("/status readinessProbe = %+v, want passed", p)
		}
		// The guest answered ARP with the MAC the VM's name gives; the bridge has its own.
		guestMAC, bridgeMAC := guestnet.MasqueradeMACs(name)
		if got := neighMAC(t, ns.name, guestnet.MasqueradeGuestIP.String()); got != guestMAC.String() {
			t.Errorf("the guest's MAC is %q, want %s from the VM's name", got, guestMAC)
		}
		if got := linkMAC(t, ns.name, guestnet.DefaultBridge); got != bridgeMAC.String() {
			t.Errorf("the bridge's MAC is %q, want %s from the VM's name", got, bridgeMAC)
		}
	})

	r.signal(t, syscall.SIGTERM)
	if code, msg := r.waitExit(t, 30*time.Second); code != runner.ExitOK || msg != "stopped on SIGTERM: guest powered off" {
		t.Fatalf("after SIGTERM: exit %d, termination message %q", code, msg)
	}
}

// forwarding reads an interface's IPv4 forwarding flag in a namespace.
func forwarding(t *testing.T, netns, dev string) string {
	t.Helper()
	return strings.TrimSpace(run(t, "ip", "netns", "exec", netns, "cat", "/proc/sys/net/ipv4/conf/"+dev+"/forwarding"))
}

// procSysReadOnly says whether a mountinfo has /proc/sys mounted read-only (the last mount there).
func procSysReadOnly(mountinfo string) bool {
	ro := false
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/proc/sys" {
			ro = strings.HasPrefix(f[5], "ro")
		}
	}
	return ro
}
