package ipv6serve

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virtpod/virtpod/pkg/network/guestnet"
	"github.com/virtpod/virtpod/tests/prereq"
)

func ipCmd(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestServeLinuxAndDHClient: a Linux network namespace standing in for the guest, at the other
// end of a veth from the server's link, takes its default route, on-link prefix and router's
// MAC from the server's advertisements, and ISC dhclient takes the address, DNS and search
// domain from its DHCPv6.
func TestServeLinuxAndDHClient(t *testing.T) {
	prereq.Need(t, os.Geteuid() == 0, "needs root: network namespaces and a packet socket")
	dhclient, err := exec.LookPath("dhclient")
	prereq.Need(t, err == nil, "needs ISC dhclient (isc-dhcp-client; tools/dev/ci/install-deps.sh)")
	srvNS, cliNS := fmt.Sprintf("vp6s-%d", os.Getpid()), fmt.Sprintf("vp6c-%d", os.Getpid())
	for _, ns := range []string{srvNS, cliNS} {
		ipCmd(t, "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	ipCmd(t, "-n", srvNS, "link", "add", "tap0", "type", "veth", "peer", "name", "eth0", "netns", cliNS)
	ipCmd(t, "-n", srvNS, "link", "set", "tap0", "addrgenmode", "none")
	ipCmd(t, "-n", srvNS, "link", "set", "tap0", "up")
	ipCmd(t, "-n", cliNS, "link", "set", "eth0", "address", guestMAC.String())
	ipCmd(t, "-n", cliNS, "link", "set", "eth0", "up")

	ns, err := os.Open(filepath.Join("/run/netns", srvNS))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	var link *os.File
	if err := guestnet.InNetns(int(ns.Fd()), func() (err error) { link, err = OpenLink("tap0"); return err }); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var answers []string
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, link, testConfig(), func(what string) { mu.Lock(); answers = append(answers, what); mu.Unlock() })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	dir := t.TempDir()
	script, env := filepath.Join(dir, "script"), filepath.Join(dir, "env")
	// What a distribution's dhclient-script does with a lease, reduced to the address.
	if err := os.WriteFile(script, []byte(`#!/bin/sh
echo "$reason $new_ip6_address/$new_ip6_prefixlen dns=$new_dhcp6_name_servers search=$new_dhcp6_domain_search" >>`+env+`
case $reason in
PREINIT6) # as Debian's: wait for the link-local address to leave duplicate address detection
	i=0; while [ $i -lt 50 ] && ip -6 addr show dev "$interface" scope link tentative | grep -q inet6; do sleep 0.1; i=$((i+1)); done ;;
BOUND6|RENEW6|REBIND6) ip -6 addr replace "$new_ip6_address/128" dev "$interface" nodad ;;
esac
`), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", cliNS, dhclient, "-6", "-d", "-v", "-cf", "/dev/null", "-sf", script,
		"-lf", filepath.Join(dir, "leases"), "-pf", filepath.Join(dir, "pid"), "eth0")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	want := "BOUND6 fd00:10:244:1::7/128 dns=fd00:10:96::a search=default.svc.cluster.local."
	var got string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		b, _ := os.ReadFile(env)
		if got = string(b); strings.Contains(got, "BOUND6") {
			break
		}
	}
	if !strings.Contains(got, want) {
		t.Fatalf("dhclient's lease: %q, want %q\ndhclient:\n%s", got, want, out.String())
	}
	// The kernel's own router discovery: the default route via the router, the prefix on-link.
	var routes string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if routes = ipCmd(t, "-n", cliNS, "-6", "route"); strings.Contains(routes, "default via "+routerLL.String()) {
			break
		}
	}
	for _, w := range []string{"default via " + routerLL.String() + " dev eth0 proto ra", "fd00:10:244:1::/64 dev eth0"} {
		if !strings.Contains(routes, w) {
			t.Errorf("the guest's IPv6 routes lack %q:\n%s", w, routes)
		}
	}
	// The router's MAC by neighbour discovery, once the entry the advertisement made is gone.
	ipCmd(t, "-n", cliNS, "-6", "neigh", "flush", "dev", "eth0")
	_ = exec.Command("ip", "netns", "exec", cliNS, "busybox", "ping", "-6", "-c", "1", "-W", "1", "-I", "eth0", routerLL.String()).Run()
	if n := ipCmd(t, "-n", cliNS, "-6", "neigh", "show", routerLL.String(), "dev", "eth0"); !strings.Contains(n, "lladdr "+routerMAC.String()) {
		t.Errorf("the guest's neighbour entry for the router: %q, want lladdr %s", n, routerMAC)
	}
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(answers, "\n")
	for _, w := range []string{"unsolicited router advertisement", "dhcpv6 ADVERTISE to SOLICIT", "dhcpv6 REPLY to REQUEST", "neighbour advertisement"} {
		if !strings.Contains(all, w) {
			t.Errorf("the server's answers lack %q:\n%s", w, all)
		}
	}
}
