package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/virtpod/virtpod/pkg/network/podnetwork"
	"github.com/virtpod/virtpod/pkg/network/spoofguard"
)

// TestGuestCannotSpoofOtherPods: in a dual-stack pod, a guest that announces another pod's
// address, sends from it and sends from another MAC, in IPv4 and IPv6, reaches nothing and
// disturbs nothing — the node still knows the other pod at its own MAC — while its own traffic
// still flows in both families and the guard counts the drops. The guest takes its IPv6
// address, router and nameserver from the runner's advertisements and DHCPv6 (pkg/network/ipv6serve).
func TestGuestCannotSpoofOtherPods(t *testing.T) {
	guest := needGuestHost(t)
	ns := newPodNetns(t, 4)
	ns.dualStack(t, 4)
	// Put the pod and another pod on one bridge, as the bridge CNI plugin does on a node.
	br := ns.onNodeBridge(t, false)
	other := fmt.Sprintf("vpt-%d-4o", os.Getpid())
	otherIf := fmt.Sprintf("vpt4o%d", os.Getpid()%10000)
	otherIP, otherIP6 := "10.213.4.3", "fd00:213:4::3"
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", other).Run()
		_ = exec.Command("ip", "link", "del", otherIf).Run()
	})
	run(t, "ip", "netns", "add", other)
	run(t, "ip", "link", "add", otherIf, "type", "veth", "peer", "name", "eth0", "netns", other)
	run(t, "ip", "link", "set", otherIf, "master", br)
	run(t, "ip", "link", "set", otherIf, "up")
	run(t, "ip", "-n", other, "addr", "add", otherIP+"/24", "dev", "eth0")
	run(t, "ip", "-n", other, "addr", "add", otherIP6+"/64", "dev", "eth0", "nodad")
	run(t, "ip", "-n", other, "link", "set", "eth0", "up")
	otherMAC := linkMAC(t, other, "eth0")
	// The node learns the other pod's MAC before the guest starts lying about it.
	run(t, "busybox", "ping", "-c", "1", "-W", "2", otherIP)

	const spoofMAC = "02:00:5e:00:00:99"
	r := startRunner(t, ns.name, append(baseArgs(t, guest, "vm-spoof"), "--network=pod", "--resolv-conf="+ns.resolvConf,
		"--kernel-args=rw virtpod.spoof="+otherIP+" virtpod.spoof-mac="+spoofMAC+" virtpod.spoof6="+otherIP6+" virtpod.spoof6-to="+ns.gwIP6)...)
	r.waitMarker(t, bootTimeout)
	// IPv6 comes after the marker: the guest's router advertisement, then DHCPv6, then the lie.
	want := []string{"virtpod guest: sent as " + otherIP, "virtpod guest: sent as MAC " + spoofMAC,
		"VIRTPOD-GUEST-IPV6 " + ns.podIP6 + " dns=" + ns.gwIP6, "virtpod guest: sent as " + otherIP6}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return strings.Contains(r.stdout.String(), w) })
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest did not play its part (%q missing):\n%s", missing, tail(r.stdout.String(), 20))
		}
	}

	if got := neighMAC(t, "", otherIP); got != otherMAC {
		t.Errorf("the node's neighbour entry for %s is %q after the guest's gratuitous ARP, want the other pod's %s", otherIP, got, otherMAC)
	}
	if fdb := run(t, "bridge", "fdb", "show", "br", br); strings.Contains(fdb, spoofMAC) {
		t.Errorf("the bridge learned the spoofed MAC %s:\n%s", spoofMAC, fdb)
	}
	// Normal traffic still flows both ways: the guest at the pod IP, the other pod at its own.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := httpGet(ctx, "http://"+ns.podIP+"/"); err != nil {
		t.Fatalf("guest HTTP at the pod IP: %v", err)
	}
	if _, err := httpGet(ctx, "http://["+ns.podIP6+"]/"); err != nil {
		t.Fatalf("guest HTTP at the pod's IPv6 address: %v", err)
	}
	run(t, "ip", "netns", "exec", other, "busybox", "ping", "-c", "1", "-W", "2", ns.gwIP)
	// The node asks for the other pod's IPv6 address: the guest, which took it, answers too,
	// and its advertisement is dropped; the other pod's is the one the node keeps.
	run(t, "ip", "-6", "neigh", "flush", "dev", br)
	run(t, "busybox", "ping", "-6", "-c", "1", "-W", "2", otherIP6)
	if got := neighMAC(t, "", otherIP6); got != otherMAC {
		t.Errorf("the node's neighbour entry for %s is %q with the guest claiming it, want the other pod's %s", otherIP6, got, otherMAC)
	}

	// The guard's counters, read in the pod's namespace where the node agent reads them: the
	// runner, without CAP_NET_ADMIN, cannot. The emulated guest's answer to the node's
	// solicitation may come after the other pod's has ended the ping (a loaded CI run read the
	// counters first): the drops must be counted within a while, not at once.
	var dropped map[string]uint64
	var missing []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var err error
		if dropped, err = podnetwork.Dropped(int(r.netns().Fd())); err != nil {
			t.Fatalf("reading the spoof guard's counters: %v", err)
		}
		missing = slices.DeleteFunc([]string{spoofguard.CounterARP, spoofguard.CounterMAC, spoofguard.CounterIP6, spoofguard.CounterND},
			func(c string) bool { return dropped[c] > 0 })
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(missing) > 0 {
		t.Errorf("spoof guard counters = %v, want %v drops counted", dropped, missing)
	}
}

func linkMAC(t *testing.T, netns, dev string) string {
	t.Helper()
	var links []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal([]byte(run(t, "ip", "-j", "-n", netns, "link", "show", dev)), &links); err != nil || len(links) != 1 {
		t.Fatalf("read %s's MAC in %s: %v", dev, netns, err)
	}
	return links[0].Address
}

func neighMAC(t *testing.T, netnsName, ip string) string {
	t.Helper()
	ns := netns.None() // the test's own namespace
	if netnsName != "" {
		var err error
		if ns, err = netns.GetFromName(netnsName); err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	want := net.ParseIP(ip)
	// A dump the kernel interrupted (neighbours changing meanwhile, as they do on a busy node)
	// may be inconsistent: ask again.
	for attempt := 0; ; attempt++ {
		neighs, err := h.NeighList(0, netlink.FAMILY_ALL)
		if errors.Is(err, netlink.ErrDumpInterrupted) && attempt < 10 {
			continue
		}
		if err != nil {
			t.Fatalf("neighbours: %v", err)
		}
		for _, n := range neighs {
			if n.IP.Equal(want) && len(n.HardwareAddr) > 0 {
				return n.HardwareAddr.String()
			}
		}
		return ""
	}
}
