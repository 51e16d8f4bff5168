package ipv6serve

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/mdlayher/ndp"
)

var (
	guestMAC  = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	routerMAC = net.HardwareAddr{0x02, 0x42, 0xac, 0x11, 0x00, 0x01}
	guestLL   = netip.MustParseAddr("fe80::5054:ff:fe12:3456")
	routerLL  = netip.MustParseAddr("fe80::42:acff:fe11:1")
)

func testConfig() Config {
	_, pfx, _ := net.ParseCIDR("fd00:10:244:1::/64")
	return Config{
		GuestMAC: guestMAC, Addr: &net.IPNet{IP: net.ParseIP("fd00:10:244:1::7"), Mask: pfx.Mask},
		RouterIP: net.IP(routerLL.AsSlice()), RouterMAC: routerMAC,
		DNS: []net.IP{net.ParseIP("fd00:10:96::a")}, Search: []string{"default.svc.cluster.local"}, MTU: 1450,
	}
}

// fromGuest frames an ICMPv6 message the guest sends.
func fromGuest(t *testing.T, src, dst netip.Addr, m ndp.Message) []byte {
	t.Helper()
	b, err := ndp.MarshalMessageChecksum(m, src, dst)
	if err != nil {
		t.Fatal(err)
	}
	return frame(multicastMAC(dst), guestMAC, src, dst, protoICMPv6, 255, b)
}

// reply parses a frame the server wrote, checking its addressing.
func reply(t *testing.T, f []byte, wantDst netip.Addr) packet {
	t.Helper()
	p, err := parseFrame(f)
	if err != nil {
		t.Fatalf("the answer is not an IPv6 frame: %v", err)
	}
	if p.src != routerLL || p.dst != wantDst || p.srcMAC.String() != routerMAC.String() {
		t.Fatalf("answer from %s (%s) to %s, want from the router %s (%s) to %s", p.src, p.srcMAC, p.dst, routerLL, routerMAC, wantDst)
	}
	wantMAC := guestMAC.String()
	if wantDst.IsMulticast() {
		wantMAC = multicastMAC(wantDst).String()
	}
	if p.dstMAC.String() != wantMAC {
		t.Fatalf("answer to MAC %s, want %s", p.dstMAC, wantMAC)
	}
	return p
}

// TestRouterAdvertisement: a router solicitation gets the router with its MAC, the pod's prefix
// on-link but not for autoconfiguration (DHCPv6 gives the address), the MTU and DNS.
func TestRouterAdvertisement(t *testing.T) {
	c := testConfig()
	f, what := c.Answer(fromGuest(t, guestLL, netip.MustParseAddr("ff02::2"), &ndp.RouterSolicitation{}))
	if what != "router advertisement" {
		t.Fatalf("answered %q", what)
	}
	p := reply(t, f, guestLL)
	m, err := ndp.ParseMessage(p.payload)
	if err != nil {
		t.Fatal(err)
	}
	ra, ok := m.(*ndp.RouterAdvertisement)
	if !ok || !ra.ManagedConfiguration || !ra.OtherConfiguration || ra.RouterLifetime != RouterLifetime {
		t.Fatalf("RA = %+v", m)
	}
	var got []string
	for _, o := range ra.Options {
		switch o := o.(type) {
		case *ndp.LinkLayerAddress:
			got = append(got, "lla "+o.Addr.String())
		case *ndp.PrefixInformation:
			got = append(got, fmt.Sprintf("prefix %s/%d onlink=%t auto=%t", o.Prefix, o.PrefixLength, o.OnLink, o.AutonomousAddressConfiguration))
		case *ndp.MTU:
			got = append(got, fmt.Sprint("mtu ", o.MTU))
		case *ndp.RecursiveDNSServer:
			got = append(got, "rdnss "+o.Servers[0].String())
		case *ndp.DNSSearchList:
			got = append(got, "dnssl "+strings.Join(o.DomainNames, ","))
		}
	}
	want := "lla 02:42:ac:11:00:01|prefix fd00:10:244:1::/64 onlink=true auto=false|mtu 1450|rdnss fd00:10:96::a|dnssl default.svc.cluster.local"
	if strings.Join(got, "|") != want {
		t.Errorf("RA options:\n got %s\nwant %s", strings.Join(got, "|"), want)
	}
	// Before the guest has an address, it solicits from :: and the answer goes to all nodes.
	f, _ = c.Answer(fromGuest(t, netip.IPv6Unspecified(), netip.MustParseAddr("ff02::2"), &ndp.RouterSolicitation{}))
	reply(t, f, allNodes)
}

// TestNeighbourAdvertisement: the server answers for the router's address alone.
func TestNeighbourAdvertisement(t *testing.T) {
	c := testConfig()
	ask := func(target netip.Addr) ([]byte, string) {
		return c.Answer(fromGuest(t, guestLL, solicitedNode(target), &ndp.NeighborSolicitation{TargetAddress: target,
			Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: guestMAC}}}))
	}
	f, what := ask(routerLL)
	if what != "neighbour advertisement" {
		t.Fatalf("answered %q", what)
	}
	m, err := ndp.ParseMessage(reply(t, f, guestLL).payload)
	if err != nil {
		t.Fatal(err)
	}
	na, ok := m.(*ndp.NeighborAdvertisement)
	if !ok || !na.Router || !na.Solicited || na.TargetAddress != routerLL || len(na.Options) != 1 ||
		na.Options[0].(*ndp.LinkLayerAddress).Addr.String() != routerMAC.String() {
		t.Fatalf("NA = %+v", m)
	}
	for _, other := range []string{"fe80::1", "fd00:10:244:1::7", "fd00:10:244:1::8"} {
		if f, what := ask(netip.MustParseAddr(other)); f != nil {
			t.Errorf("answered %q for %s, which is not the router", what, other)
		}
	}
}

func solicitedNode(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom16([16]byte{0xff, 0x02, 11: 1, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
}

// TestDHCPv6: solicit, request and renew get the pod's address in the client's IA with DNS and
// search domains; a request to another server is left to it.
func TestDHCPv6(t *testing.T) {
	c := testConfig()
	ask := func(m *dhcpv6.Message) *dhcpv6.Message {
		t.Helper()
		dst := netip.MustParseAddr("ff02::1:2")
		f := frame(multicastMAC(dst), guestMAC, guestLL, dst, protoUDP, 1, udp(guestLL, dst, portClient, portServer, m.ToBytes()))
		out, _ := c.Answer(f)
		if out == nil {
			return nil
		}
		p := reply(t, out, guestLL)
		if len(p.payload) < 8 || p.payload[1] != 0x23 || p.payload[3] != 0x22 {
			t.Fatalf("not from port 547 to 546: % x", p.payload[:8])
		}
		got, err := dhcpv6.MessageFromBytes(p.payload[8:])
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	sol, err := dhcpv6.NewSolicit(guestMAC)
	if err != nil {
		t.Fatal(err)
	}
	adv := ask(sol)
	if adv == nil || adv.Type() != dhcpv6.MessageTypeAdvertise {
		t.Fatalf("solicit answered with %v", adv)
	}
	checkLease(t, adv, sol)
	req, err := dhcpv6.NewRequestFromAdvertise(adv)
	if err != nil {
		t.Fatal(err)
	}
	rep := ask(req)
	if rep == nil || rep.Type() != dhcpv6.MessageTypeReply {
		t.Fatalf("request answered with %v", rep)
	}
	checkLease(t, rep, req)
	renew := *req
	renew.MessageType = dhcpv6.MessageTypeRenew
	if rep := ask(&renew); rep == nil {
		t.Fatal("renew not answered")
	} else {
		checkLease(t, rep, req)
	}
	other := *req
	other.Options = dhcpv6.MessageOptions{}
	for _, o := range req.Options.Options {
		if o.Code() != dhcpv6.OptionServerID {
			other.AddOption(o)
		}
	}
	other.AddOption(dhcpv6.OptServerID(&dhcpv6.DUIDLL{HWType: 1, LinkLayerAddr: net.HardwareAddr{2, 0, 0, 0, 0, 9}}))
	if rep := ask(&other); rep != nil {
		t.Errorf("a request to another server was answered: %v", rep)
	}
}

func checkLease(t *testing.T, m, req *dhcpv6.Message) {
	t.Helper()
	ia := m.Options.OneIANA()
	if ia == nil || ia.IaId != req.Options.OneIANA().IaId {
		t.Fatalf("%s has IA %+v, want the client's IAID", m.Type(), ia)
	}
	a := ia.Options.OneAddress()
	if a == nil || !a.IPv6Addr.Equal(net.ParseIP("fd00:10:244:1::7")) || a.ValidLifetime == 0 {
		t.Errorf("%s leases %+v, want fd00:10:244:1::7", m.Type(), a)
	}
	if d := m.Options.DNS(); len(d) != 1 || !d[0].Equal(net.ParseIP("fd00:10:96::a")) {
		t.Errorf("%s DNS = %v", m.Type(), d)
	}
	if !m.Options.ClientID().Equal(req.Options.ClientID()) {
		t.Errorf("%s is for another client", m.Type())
	}
}

// TestAnswerHostileInput: frames from another MAC, truncated or random frames get no answer
// and no panic; a config with a bad field is refused naming it.
func TestAnswerHostileInput(t *testing.T) {
	c := testConfig()
	rs := fromGuest(t, guestLL, netip.MustParseAddr("ff02::2"), &ndp.RouterSolicitation{})
	spoofed := append([]byte(nil), rs...)
	copy(spoofed[6:12], []byte{2, 0, 0, 0, 0, 1})
	if f, _ := c.Answer(spoofed); f != nil {
		t.Error("answered a solicitation from another MAC")
	}
	for i := range len(rs) {
		if f, what := c.Answer(rs[:i]); f != nil {
			t.Errorf("answered %q to a frame cut at %d bytes", what, i)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		f := append([]byte(nil), rs...)
		for range 1 + r.IntN(4) {
			f[14+r.IntN(len(f)-14)] = byte(r.Uint32())
		}
		c.Answer(f) // must not panic
	}
	for field, bad := range map[string]func(*Config){
		"guest MAC":     func(c *Config) { c.GuestMAC = nil },
		"guest address": func(c *Config) { c.Addr = &net.IPNet{IP: net.IPv4(10, 0, 0, 1), Mask: net.CIDRMask(24, 32)} },
		"router":        func(c *Config) { c.RouterIP = net.ParseIP("fd00::1") },
		"router MAC":    func(c *Config) { c.RouterMAC = nil },
		"nameserver":    func(c *Config) { c.DNS = []net.IP{net.IPv4(10, 96, 0, 10)} },
	} {
		c := testConfig()
		bad(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("bad %s: Validate = %v, want an error naming it", field, err)
		}
	}
}
