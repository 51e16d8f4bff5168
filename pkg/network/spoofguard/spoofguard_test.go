package spoofguard

import (
	"bytes"
	"encoding/binary"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/pkg/network/inetsum"
	"github.com/virtpod/virtpod/tests/netcapture"
	"github.com/virtpod/virtpod/tests/netnstest"
	"github.com/virtpod/virtpod/tests/prereq"
)

var update = flag.Bool("update", false, "rewrite the golden file")

var (
	guestMAC = net.HardwareAddr{0x0a, 0x58, 0x0a, 0xd5, 0x01, 0x02}
	podIP    = net.IPv4(10, 213, 1, 2).To4()
	podIP6   = net.ParseIP("fd00:213:1::2")
	otherIP6 = net.ParseIP("fd00:213:1::3")
	guestLL  = net.ParseIP("fe80::858:aff:fed5:102") // what guestMAC forms
	otherIP  = net.IPv4(10, 213, 1, 3).To4()         // another pod on the node's bridge
	otherMAC = net.HardwareAddr{0x0a, 0x58, 0x0a, 0xd5, 0x01, 0x03}
	gwMAC    = net.HardwareAddr{0x0a, 0x58, 0x0a, 0xd5, 0x01, 0x01} // the guest's default gateway
	relay    = Relay{IP: net.IPv4(169, 254, 75, 1).To4(), BridgeMAC: net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x00, 0x01}}
)

func TestRulesGolden(t *testing.T) {
	rules, err := Rules(guestMAC, podIP, nil, relay.BridgeMAC)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "rules.golden", rules)
	if rules, err = Rules(guestMAC, podIP, podIP6, relay.BridgeMAC); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "rules-dual-stack.golden", rules)
	if rules, err = Rules(guestMAC, nil, podIP6, relay.BridgeMAC); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "rules-ipv6-only.golden", rules)
}

// TestRelayRulesGolden: the relay's rule, as Install puts it before the guard's.
func TestRelayRulesGolden(t *testing.T) {
	rules, err := RelayRules(relay)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "relay.golden", rules)
	for _, bad := range []Relay{
		{IP: net.IPv4(10, 0, 0, 1), BridgeMAC: relay.BridgeMAC},
		{IP: nil, BridgeMAC: relay.BridgeMAC},
		{IP: relay.IP, BridgeMAC: nil},
	} {
		if _, err := RelayRules(bad); err == nil {
			t.Errorf("RelayRules(%+v) accepted", bad)
		}
	}
}

func checkGolden(t *testing.T, name string, rules []Rule) {
	t.Helper()
	var b strings.Builder
	for _, r := range rules {
		b.WriteString(r.String() + "\n")
	}
	golden := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("rules differ from %s (go test -update to accept):\n%s", golden, b.String())
	}
}

func TestRulesRefuseBadInput(t *testing.T) {
	for _, tc := range []struct {
		mac     net.HardwareAddr
		ip, ip6 net.IP
		err     string
	}{
		{nil, podIP, nil, "MAC"},
		{net.HardwareAddr{1, 2, 3, 4, 5, 6, 7, 8}, podIP, nil, "MAC"},
		{guestMAC, nil, nil, "no address"},
		{guestMAC, net.IPv4zero, nil, "IPv4"},
		{guestMAC, net.ParseIP("fd00::2"), nil, "IPv4"},
		{guestMAC, podIP, podIP, "IPv6"},
		{guestMAC, podIP, guestLL, "IPv6"},
		{guestMAC, podIP, net.IPv6unspecified, "IPv6"},
	} {
		if _, err := Rules(tc.mac, tc.ip, tc.ip6, relay.BridgeMAC); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Rules(%v, %v, %v) = %v, want an error about the %s", tc.mac, tc.ip, tc.ip6, err, tc.err)
		}
	}
}

// TestGuardInKernel installs the guard, with the relay's rule before it, in a fresh network
// namespace on one port of a bridge, as the runner does on the tap, sends real frames into that
// port and watches which ones come out of another port of the bridge, which ones the namespace
// itself receives at the relay address, and what the counters say.
func TestGuardInKernel(t *testing.T) {
	prereq.Need(t, os.Geteuid() == 0, "needs root: a network namespace, a bridge and nftables")
	frames := []struct {
		name    string
		frame   []byte
		passes  bool
		counter string
		local   bool // received by the namespace: at the relay address, or, for DHCP, on port 67 of the bridge
	}{
		{"ARP reply for the pod IP", arp(guestMAC, guestMAC, podIP), true, "", false},
		{"ARP probe from 0.0.0.0", arp(guestMAC, guestMAC, net.IPv4zero.To4()), true, "", false},
		{"UDP from the pod IP", udp(guestMAC, podIP, 5353), true, "", false},
		// DHCP reaches the runner's socket on the bridge and nothing else, and is not spoofing.
		{"DHCP discover from 0.0.0.0", udp(guestMAC, net.IPv4zero.To4(), 67), false, "", true},
		{"DHCP renewal from the pod IP", udp(guestMAC, podIP, 67), false, "", true},
		{"another MAC", udp(otherMAC, podIP, 5353), false, CounterMAC, false},
		{"gratuitous ARP claiming another pod's IP", arp(guestMAC, guestMAC, otherIP), false, CounterARP, false},
		{"ARP naming another sender MAC", arp(guestMAC, otherMAC, podIP), false, CounterARP, false},
		{"UDP from another pod's IP", udp(guestMAC, otherIP, 5353), false, CounterIP, false},
		{"UDP from 0.0.0.0 that is not DHCP", udp(guestMAC, net.IPv4zero.To4(), 53), false, CounterIP, false},
		// IPv6: the guest's own addresses pass, its neighbour advertisements only for them; the
		// runner's protocols stay off the pod network uncounted.
		{"UDP from the pod's IPv6 address", ip6(guestMAC, podIP6, 17, udp6(5353)), true, "", false},
		{"UDP from the guest's link-local address", ip6(guestMAC, guestLL, 17, udp6(5353)), true, "", false},
		{"neighbour advertisement for the pod's IPv6 address", ip6(guestMAC, guestLL, 58, nd(136, podIP6)), true, "", false},
		{"neighbour advertisement for its link-local address", ip6(guestMAC, podIP6, 58, nd(136, guestLL)), true, "", false},
		{"duplicate address detection from ::", ip6(guestMAC, net.IPv6unspecified, 58, nd(135, podIP6)), true, "", false},
		{"neighbour solicitation for another pod", ip6(guestMAC, guestLL, 58, nd(135, otherIP6)), true, "", false},
		{"neighbour advertisement for another pod's address", ip6(guestMAC, guestLL, 58, nd(136, otherIP6)), false, CounterND, false},
		{"neighbour advertisement for the gateway's link-local", ip6(guestMAC, podIP6, 58, nd(136, net.ParseIP("fe80::1"))), false, CounterND, false},
		{"the same behind a destination-options header", ip6(guestMAC, guestLL, 60, append([]byte{58, 0, 1, 4, 0, 0, 0, 0}, nd(136, otherIP6)...)), false, CounterND, false},
		{"router advertisement", ip6(guestMAC, guestLL, 58, nd(134, nil)), false, CounterND, false},
		{"router solicitation", ip6(guestMAC, guestLL, 58, nd(133, nil)), false, "", false},
		{"DHCPv6", ip6(guestMAC, guestLL, 17, udp6(547)), false, "", false},
		{"UDP from another pod's IPv6 address", ip6(guestMAC, otherIP6, 17, udp6(5353)), false, CounterIP6, false},
		{"UDP from :: that is not address detection", ip6(guestMAC, net.IPv6unspecified, 17, udp6(5353)), false, CounterIP6, false},
		{"IPv6 from another link-local address", ipv6(guestMAC), false, CounterIP6, false},
		{"another protocol", ether(guestMAC, 0x88b5, []byte{1, 2, 3, 4}), false, CounterOther, false},
		// The guest's reply to the relay, sent to its gateway's MAC as for any address off its
		// subnet, is turned to the bridge and reaches the namespace, not the pod network.
		{"reply to the relay address", udpTo(gwMAC, guestMAC, podIP, relay.IP, relayPort), false, "", true},
		// The guard still judges what the relay rule turned: a spoofed source is dropped.
		{"spoofed reply to the relay address", udpTo(gwMAC, guestMAC, otherIP, relay.IP, relayPort), false, CounterIP, false},
		// Traffic to anyone else keeps its destination MAC and goes out as before.
		{"unicast to the gateway", udpTo(gwMAC, guestMAC, podIP, net.IPv4(10, 213, 1, 1).To4(), relayPort), true, "", false},
	}

	type sent struct {
		got     [][]byte
		local   [][]byte // datagrams the namespace's sockets received: at the relay address, and DHCP's on the bridge
		dropped map[string]uint64
		err     error
	}
	var s sent
	s.err = netnstest.Run(func() error {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/disable_ipv6", []byte("1"), 0o644); err != nil {
			return err
		}
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0", HardwareAddr: relay.BridgeMAC}}
		if err := netlink.LinkAdd(br); err != nil {
			return err
		}
		// tap0 stands in for the guest's tap: frames written into inj0 arrive on it.
		for _, p := range [][2]string{{"tap0", "inj0"}, {"out0", "cap0"}} {
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p[0]}, PeerName: p[1]}); err != nil {
				return err
			}
			l, _ := netlink.LinkByName(p[0])
			if err := netlink.LinkSetMaster(l, br); err != nil {
				return err
			}
		}
		for _, n := range []string{"br0", "tap0", "inj0", "out0", "cap0"} {
			l, _ := netlink.LinkByName(n)
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
		}
		// The relay address on the bridge and the route back to the guest, as pkg/network/guestnet
		// sets them up.
		if err := netlink.AddrAdd(br, &netlink.Addr{IPNet: &net.IPNet{IP: relay.IP, Mask: net.CIDRMask(32, 32)}}); err != nil {
			return err
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: br.Attrs().Index, Dst: &net.IPNet{IP: podIP, Mask: net.CIDRMask(32, 32)},
			Src: relay.IP, Scope: netlink.SCOPE_LINK}); err != nil {
			return err
		}
		if err := Install("tap0", guestMAC, podIP, podIP6, relay.BridgeMAC, &relay); err != nil {
			return err
		}
		// Installing twice replaces the first guard (an agent plumbing the pod again).
		if err := Install("tap0", guestMAC, podIP, podIP6, relay.BridgeMAC, &relay); err != nil {
			return err
		}
		// The runner's DHCP socket: port 67 on the bridge alone.
		dhcpfd, err := udpSocket(net.IPv4zero, 67)
		if err != nil {
			return err
		}
		defer unix.Close(dhcpfd)
		if err := unix.BindToDevice(dhcpfd, "br0"); err != nil {
			return err
		}
		udpfd, err := udpSocket(relay.IP, relayPort)
		if err != nil {
			return err
		}
		defer unix.Close(udpfd)
		capfd, err := netcapture.Open("cap0")
		if err != nil {
			return err
		}
		defer unix.Close(capfd)
		injfd, err := netcapture.Open("inj0")
		if err != nil {
			return err
		}
		defer unix.Close(injfd)
		time.Sleep(100 * time.Millisecond) // bridge ports forwarding (no STP: immediate, but be safe)
		for _, f := range frames {
			if _, err := unix.Write(injfd, f.frame); err != nil {
				return err
			}
		}
		s.got = netcapture.Read(capfd, time.Second)
		s.local = append(netcapture.Read(udpfd, 200*time.Millisecond), netcapture.Read(dhcpfd, 100*time.Millisecond)...)
		s.dropped, err = Dropped()
		return err
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	want := map[string]uint64{}
	for i, f := range frames {
		seen := false
		for _, g := range s.got {
			if bytes.Contains(g, tag(i)) {
				seen = true
			}
		}
		if seen != f.passes {
			t.Errorf("%s: came out of the bridge = %v, want %v", f.name, seen, f.passes)
		}
		local := false
		for _, g := range s.local {
			if bytes.Contains(g, tag(i)) {
				local = true
			}
		}
		if local != f.local {
			t.Errorf("%s: received by the namespace (at %s, or DHCP on the bridge) = %v, want %v", f.name, relay.IP, local, f.local)
		}
		if f.counter != "" {
			want[f.counter]++
		}
	}
	for _, c := range Counters {
		if s.dropped[c] != want[c] {
			t.Errorf("counter %q = %d, want %d (all: %v)", c, s.dropped[c], want[c], s.dropped)
		}
	}
}

var next int

// tag marks a frame's payload so the capture side can tell the test's frames apart.
func tag(i int) []byte { return []byte("virtpod-spoofguard-frame-" + string(rune('A'+i)) + ";") }

func ether(src net.HardwareAddr, typ uint16, payload []byte) []byte {
	return etherTo(broadcast, src, typ, payload)
}

func etherTo(dst, src net.HardwareAddr, typ uint16, payload []byte) []byte {
	b := append([]byte{}, dst...)
	b = append(b, src...)
	b = binary.BigEndian.AppendUint16(b, typ)
	b = append(b, payload...)
	b = append(b, tag(next)...)
	next++
	for len(b) < 60 {
		b = append(b, 0)
	}
	return b
}

func arp(src, sha net.HardwareAddr, spa net.IP) []byte {
	p := []byte{0, 1, 8, 0, 6, 4, 0, 2}
	p = append(p, sha...)
	p = append(p, spa...)
	p = append(p, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	p = append(p, spa...)
	return ether(src, 0x0806, p)
}

func udp(src net.HardwareAddr, saddr net.IP, dport uint16) []byte {
	return udpTo(broadcast, src, saddr, net.IPv4bcast.To4(), dport)
}

var broadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// relayPort is where the namespace listens at the relay address in the test.
const relayPort = 7531

func udpTo(dst, src net.HardwareAddr, saddr, daddr net.IP, dport uint16) []byte {
	data := tag(next)
	u := binary.BigEndian.AppendUint16(nil, 68)
	u = binary.BigEndian.AppendUint16(u, dport)
	u = binary.BigEndian.AppendUint16(u, uint16(8+len(data)))
	u = append(u, 0, 0) // no UDP checksum
	u = append(u, data...)
	h := []byte{0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0}
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(u)))
	h = append(h, saddr...)
	h = append(h, daddr...)
	binary.BigEndian.PutUint16(h[10:], inetsum.Checksum(h))
	return etherTo(dst, src, 0x0800, append(h, u...))
}

func ipv6(src net.HardwareAddr) []byte {
	h := make([]byte, 40)
	h[0] = 0x60
	h[6], h[7] = 59, 1 // no next header
	h[8], h[9] = 0xfe, 0x80
	return ether(src, 0x86dd, h)
}

// ip6 frames an IPv6 packet to all nodes whose payload (next header nh) carries the tag; the
// payload length covers it.
func ip6(src net.HardwareAddr, saddr net.IP, nh byte, payload []byte) []byte {
	payload = append(payload, tag(next)...) // the tag etherTo gives the frame, inside the payload
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(payload)))
	h[6], h[7] = nh, 255
	copy(h[8:24], saddr.To16())
	copy(h[24:40], net.ParseIP("ff02::1"))
	return etherTo(net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}, src, 0x86dd, append(h, payload...))
}

// nd is an ICMPv6 neighbour discovery message of type typ about target (none: nil).
func nd(typ byte, target net.IP) []byte {
	b := []byte{typ, 0, 0, 0, 0, 0, 0, 0}
	if target != nil {
		b = append(b, target.To16()...)
	}
	return b
}

func udp6(dport uint16) []byte {
	u := binary.BigEndian.AppendUint16(nil, 546)
	u = binary.BigEndian.AppendUint16(u, dport)
	return append(u, 0, 8, 0, 0)
}

// udpSocket listens at ip:port in the current namespace.
func udpSocket(ip net.IP, port int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return -1, err
	}
	sa := &unix.SockaddrInet4{Port: port}
	copy(sa.Addr[:], ip.To4())
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
