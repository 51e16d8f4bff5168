package guestnet

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/tests/netnstest"
	"github.com/vishvananda/netlink"
)

// TestMasqueradeMACs: fixed per VM name (a migration target derives the same), unicast and
// locally administered, the guest's never the bridge's, different names different MACs.
func TestMasqueradeMACs(t *testing.T) {
	for name, want := range map[string][2]string{
		// Pinned: a change here changes every masquerade guest's MAC, which a migration between
		// runner versions would carry to a bridge with another MAC.
		"vm-1":  {"96:fa:ee:eb:d8:0d", "92:53:1c:1e:58:dd"},
		"web-0": {"0e:ba:3e:8c:b5:ee", "ca:c2:1d:8e:be:98"},
	} {
		g, b := MasqueradeMACs(name)
		if g.String() != want[0] || b.String() != want[1] {
			t.Errorf("MasqueradeMACs(%q) = %s, %s; want %s, %s", name, g, b, want[0], want[1])
		}
	}
	seen := map[string]string{}
	for i := range 2000 {
		name := fmt.Sprintf("vm-%d", i)
		g, b := MasqueradeMACs(name)
		g2, b2 := MasqueradeMACs(name)
		if g.String() != g2.String() || b.String() != b2.String() {
			t.Fatalf("%s: MACs differ between calls", name)
		}
		for _, m := range []net.HardwareAddr{g, b} {
			if len(m) != 6 || m[0]&0x01 != 0 || m[0]&0x02 == 0 {
				t.Fatalf("%s: %s is not a unicast, locally administered MAC", name, m)
			}
			if other, dup := seen[m.String()]; dup {
				t.Fatalf("%s and %s share the MAC %s", name, other, m)
			}
			seen[m.String()] = name
		}
	}
}

func TestMasqueradeGuestAndKernelArg(t *testing.T) {
	pod := PodInterface{Name: "eth0", MTU: 1450, Addr: &net.IPNet{IP: net.IPv4(10, 218, 0, 7).To4(), Mask: net.CIDRMask(24, 32)},
		Gateway: net.IPv4(10, 218, 0, 1), DNS: []net.IP{net.IPv4(10, 219, 0, 10)}, Search: []string{"default.svc.cluster.local"}}
	g, _ := MasqueradeMACs("vm-1")
	guest := MasqueradeGuest(pod, g)
	if got, want := guest.KernelIPArg("vm-1"), "ip=10.0.2.2::10.0.2.1:255.255.255.0:vm-1:eth0:off:10.219.0.10"; got != want {
		t.Errorf("KernelIPArg = %q, want %q", got, want)
	}
	if guest.MTU != 1450 || len(guest.Search) != 1 || guest.MAC.String() != g.String() {
		t.Errorf("MasqueradeGuest = %+v", guest)
	}
	if err := MasqueradeOverlap(pod); err != nil {
		t.Errorf("pod %s refused: %v", pod.Addr, err)
	}
	// Dual-stack: the fixed IPv6 address beside; IPv6-only: that alone, and no ip=.
	pod6 := PodInterface{Name: "eth0", MTU: 1450, Addr6: &net.IPNet{IP: net.ParseIP("fd00:218::7"), Mask: net.CIDRMask(64, 128)},
		Gateway6: net.ParseIP("fd00:218::1"), DNS6: []net.IP{net.ParseIP("fd00:219::a")}}
	dual := pod
	dual.Addr6, dual.Gateway6, dual.DNS6 = pod6.Addr6, pod6.Gateway6, pod6.DNS6
	for name, tc := range map[string]struct {
		pod      PodInterface
		v4, v6   bool
		kernelIP bool
	}{"dual-stack": {dual, true, true, true}, "IPv6-only": {pod6, false, true, false}} {
		g := MasqueradeGuest(tc.pod, g)
		if (g.Addr != nil) != tc.v4 || (g.Addr6 != nil) != tc.v6 || (g.KernelIPArg("vm-1") != "") != tc.kernelIP ||
			tc.v6 && (g.Addr6.String() != "fd10:0:2::2/120" || !g.Gateway6.Equal(MasqueradeGatewayIP6) || len(g.DNS6) != 1) {
			t.Errorf("%s: MasqueradeGuest = %+v", name, g)
		}
		if err := MasqueradeOverlap(tc.pod); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
	for name, mod := range map[string]func(*PodInterface){
		"pod IP inside": func(p *PodInterface) {
			p.Addr = &net.IPNet{IP: net.IPv4(10, 0, 2, 9).To4(), Mask: net.CIDRMask(32, 32)}
		},
		"wide subnet":      func(p *PodInterface) { p.Addr = &net.IPNet{IP: net.IPv4(10, 1, 0, 9).To4(), Mask: net.CIDRMask(8, 32)} },
		"gateway inside":   func(p *PodInterface) { p.Gateway = net.IPv4(10, 0, 2, 1) },
		"DNS server in it": func(p *PodInterface) { p.DNS = []net.IP{net.IPv4(10, 0, 2, 3)} },
		"IPv6 pod IP inside": func(p *PodInterface) {
			p.Addr6 = &net.IPNet{IP: net.ParseIP("fd10:0:2::9"), Mask: net.CIDRMask(128, 128)}
		},
		"wide IPv6 subnet": func(p *PodInterface) {
			p.Addr6 = &net.IPNet{IP: net.ParseIP("fd10::9"), Mask: net.CIDRMask(16, 128)}
		},
		"IPv6 DNS in it": func(p *PodInterface) {
			p.Addr6 = &net.IPNet{IP: net.ParseIP("fd00::9"), Mask: net.CIDRMask(64, 128)}
			p.DNS6 = []net.IP{net.ParseIP("fd10:0:2::3")}
		},
	} {
		p := pod
		mod(&p)
		if err := MasqueradeOverlap(p); err == nil || !strings.Contains(err.Error(), "use network mode Pod") {
			t.Errorf("%s: MasqueradeOverlap = %v, want a refusal naming network mode Pod", name, err)
		}
	}
}

// TestPlumbMasqueradeInNetns: the pod interface keeps its address and MAC; the bridge holds the
// gateway with the fixed MAC, the tap is in it, and IPv4 forwarding is on for the pod interface
// and the bridge, as netlink and /proc/sys both report; a second run (a restarted runner)
// replaces the first's devices.
func TestPlumbMasqueradeInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (CI=true: failing instead of skipping)")
		}
		t.Skip("needs root to create a network namespace")
	}
	type result struct {
		pod, pod2     PodInterface
		pl            *Plumbing
		err           error
		eth0, br, tap netlink.Link
		brIPs         []netlink.Addr
		fwd           map[string]string // /proc/sys forwarding per interface
		offAgain      bool
	}
	var r result
	// A pod interface: a veth with an address and a default route, forwarding off as in a
	// namespace that did not inherit it.
	r.err = netnstest.Run(func() error {
		var err error
		d := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", MTU: 1450}, PeerName: "peer0"}
		if err := netlink.LinkAdd(d); err != nil {
			return err
		}
		l, _ := netlink.LinkByName("eth0")
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 213, 40, 2), Mask: net.CIDRMask(24, 32)}}); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		if err := netlink.RouteAdd(&netlink.Route{Gw: net.IPv4(10, 213, 40, 1), LinkIndex: l.Attrs().Index}); err != nil {
			return err
		}
		if err := netlink.LinkSetMTU(l, 1450); err != nil {
			return err
		}
		// Off everywhere, also for interfaces created later: the namespace copied the
		// host's setting.
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/all/forwarding", []byte("0"), 0o644); err != nil {
			return err
		}
		if on, err := Forwarding(l); err != nil || on {
			return fmt.Errorf("forwarding on eth0 before the plumbing: %v, %v", on, err)
		}
		if r.pod, err = Discover("eth0", "/nonexistent"); err != nil {
			return err
		}
		for range 2 {
			if r.pl, err = PlumbMasquerade(r.pod, "vm-1", DefaultBridge, DefaultTap, TapOwner{UID: 107, GID: 107}); err != nil {
				return err
			}
		}
		r.eth0, _ = netlink.LinkByName("eth0")
		r.br, _ = netlink.LinkByName(DefaultBridge)
		r.tap, _ = netlink.LinkByName(DefaultTap)
		r.brIPs, _ = netlink.AddrList(r.br, netlink.FAMILY_V4)
		r.pod2, _ = Discover("eth0", "/nonexistent")
		r.fwd = map[string]string{}
		for _, n := range []string{"eth0", DefaultBridge, DefaultTap} {
			b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + n + "/forwarding")
			if err != nil {
				return err
			}
			r.fwd[n] = strings.TrimSpace(string(b))
		}
		if err := SetForwarding(r.br, false); err != nil {
			return err
		}
		on, err := Forwarding(r.br)
		r.offAgain = err == nil && !on
		return err
	})
	if r.err != nil {
		t.Fatal(r.err)
	}
	guestMAC, bridgeMAC := MasqueradeMACs("vm-1")
	if r.pod2.Addr.String() != "10.213.40.2/24" || r.pod2.MAC.String() != r.pod.MAC.String() || r.eth0.Attrs().MasterIndex != 0 {
		t.Errorf("pod interface changed: %+v, master %d", r.pod2, r.eth0.Attrs().MasterIndex)
	}
	if r.br.Attrs().HardwareAddr.String() != bridgeMAC.String() || r.pl.GuestMAC.String() != guestMAC.String() || r.pl.BridgeMAC.String() != bridgeMAC.String() {
		t.Errorf("bridge MAC %s, plumbing %s/%s; want guest %s, bridge %s", r.br.Attrs().HardwareAddr, r.pl.GuestMAC, r.pl.BridgeMAC, guestMAC, bridgeMAC)
	}
	if len(r.brIPs) != 1 || r.brIPs[0].IPNet.String() != "10.0.2.1/24" {
		t.Errorf("bridge addresses %v, want 10.0.2.1/24 only", r.brIPs)
	}
	if r.tap.Attrs().MasterIndex != r.br.Attrs().Index || r.tap.Attrs().MTU != 1450 || r.br.Attrs().MTU != 1450 {
		t.Errorf("tap master %d (bridge %d), MTU tap %d bridge %d", r.tap.Attrs().MasterIndex, r.br.Attrs().Index, r.tap.Attrs().MTU, r.br.Attrs().MTU)
	}
	if r.fwd["eth0"] != "1" || r.fwd[DefaultBridge] != "1" || r.fwd[DefaultTap] != "0" {
		t.Errorf("forwarding per /proc/sys: %v; want eth0 and %s on, the tap (a bridge port) untouched", r.fwd, DefaultBridge)
	}
	if !r.offAgain {
		t.Error("SetForwarding(false) did not turn forwarding off again")
	}
	if g := r.pl.Guest; g.Addr.String() != "10.0.2.2/24" || !g.Gateway.Equal(MasqueradeGatewayIP) {
		t.Errorf("guest addressing %+v", g)
	}
}
