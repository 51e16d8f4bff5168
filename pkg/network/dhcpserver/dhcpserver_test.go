package dhcpserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/virtpod/virtpod/tests/prereq"
)

var guestMAC = net.HardwareAddr{0x0a, 0x58, 0x0a, 0xd5, 0x09, 0x02}

func lease(cidr, gw string) Lease {
	ip, n, _ := net.ParseCIDR(cidr)
	n.IP = ip
	return Lease{
		MAC: guestMAC, Addr: n, Gateway: net.ParseIP(gw), ServerID: net.ParseIP(gw),
		DNS: []net.IP{net.ParseIP("10.96.0.10")}, Search: []string{"default.svc.cluster.local", "svc.cluster.local"},
		Hostname: "vm-1", MTU: 1450,
	}
}

// TestReplyDecisions: who gets what answer, from real DHCP messages built by the library's client
// side.
func TestReplyDecisions(t *testing.T) {
	l := lease("10.213.9.2/24", "10.213.9.1")
	other := net.HardwareAddr{0x0a, 0x58, 0x0a, 0xd5, 0x09, 0x03}
	discover := func(mac net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
		m, err := dhcpv4.NewDiscovery(mac, mods...)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	request := func(ip string) *dhcpv4.DHCPv4 {
		return discover(guestMAC, dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP(ip))))
	}
	for _, tc := range []struct {
		name string
		req  *dhcpv4.DHCPv4
		want dhcpv4.MessageType // MessageTypeNone: no answer
	}{
		{"discover", discover(guestMAC), dhcpv4.MessageTypeOffer},
		{"another MAC", discover(other), dhcpv4.MessageTypeNone},
		{"request for the pod IP", request("10.213.9.2"), dhcpv4.MessageTypeAck},
		{"request for a stale address (a guest moved from another pod)", request("10.213.7.2"), dhcpv4.MessageTypeNak},
		{"release", discover(guestMAC, dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease)), dhcpv4.MessageTypeNone},
		{"decline", discover(guestMAC, dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline)), dhcpv4.MessageTypeNone},
		{"inform", discover(guestMAC, dhcpv4.WithMessageType(dhcpv4.MessageTypeInform)), dhcpv4.MessageTypeAck},
	} {
		resp, ok := l.Reply(tc.req)
		got := dhcpv4.MessageTypeNone
		if ok {
			got = resp.MessageType()
		}
		if got != tc.want {
			t.Errorf("%s: answer %v, want %v", tc.name, got, tc.want)
		}
	}
	if resp, _ := l.Reply(discover(guestMAC, dhcpv4.WithMessageType(dhcpv4.MessageTypeInform))); resp.YourIPAddr != nil && !resp.YourIPAddr.IsUnspecified() {
		t.Errorf("an INFORM answer carries an address: %v", resp.YourIPAddr)
	}
}

func TestValidate(t *testing.T) {
	good := lease("10.213.9.2/24", "10.213.9.1")
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	v6 := good
	_, v6.Addr, _ = net.ParseCIDR("fd00::2/64")
	for name, l := range map[string]Lease{"no MAC": {Addr: good.Addr, Gateway: good.Gateway, ServerID: good.ServerID}, "IPv6 only": v6} {
		if err := l.Validate(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestServeRealExchange runs the server on one end of a veth pair, as the runner does on the
// bridge, without any capability's help (a UDP socket), and the library's real DHCP client on
// the other end, as the guest: the whole exchange, what the
// lease says, the same answer on a second run (a reboot), the /32 case with its classless route,
// and silence for another MAC and on another interface.
func TestServeRealExchange(t *testing.T) {
	prereq.Need(t, os.Geteuid() == 0, "needs root: a network namespace, and the client's packet socket")
	type result struct {
		first, again, slash32 *nclient4.Lease
		otherErr, otherIfErr  error
		err                   error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread() // the thread stays in the namespace and is never reused
		var r result
		defer func() { done <- r }()
		ns, err := netns.New()
		if err != nil {
			r.err = err
			return
		}
		defer ns.Close()
		r.err = func() error {
			for _, p := range [][2]string{{"srv0", "cli0"}, {"eth0", "cli1"}} {
				if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p[0]}, PeerName: p[1]}); err != nil {
					return err
				}
			}
			for _, n := range []string{"srv0", "cli0", "eth0", "cli1"} {
				l, _ := netlink.LinkByName(n)
				if n == "cli0" || n == "cli1" {
					if err := netlink.LinkSetHardwareAddr(l, guestMAC); err != nil {
						return err
					}
				}
				if err := netlink.LinkSetUp(l); err != nil {
					return err
				}
			}
			// A veth passes frames only once both ends are operationally up, which a loaded
			// machine (the whole test suite at once) can take a while to report.
			for deadline := time.Now().Add(10 * time.Second); ; {
				a, _ := netlink.LinkByName("srv0")
				b, _ := netlink.LinkByName("cli0")
				if a != nil && b != nil && a.Attrs().OperState == netlink.OperUp && b.Attrs().OperState == netlink.OperUp {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("the veth pair srv0/cli0 is not up after 10s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			// As the node agent leaves the pod's bridge: an address towards the guest and the
			// guest's address pinned to its MAC, so answers need no ARP.
			srv, _ := netlink.LinkByName("srv0")
			for _, a := range []string{"10.213.9.1/24", "169.254.1.1/32"} {
				addr, _ := netlink.ParseAddr(a)
				if err := netlink.AddrAdd(srv, addr); err != nil {
					return err
				}
			}
			if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: srv.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
				IP: net.ParseIP("10.213.9.2"), HardwareAddr: guestMAC}); err != nil {
				return err
			}
			// stop returns once the server has: a server still reading for up to 200 ms after its
			// cancel would offer its old lease beside the next one, and a client that takes that
			// offer asks a server that is gone (seen as a request timing out now and then).
			serve := func(l Lease) (stop func()) {
				ctx, cancel := context.WithCancel(context.Background())
				ended := make(chan struct{})
				go func() {
					defer close(ended)
					runtime.LockOSThread() // a new goroutine's thread is in the host's namespace
					if err := netns.Set(ns); err != nil {
						panic(err)
					}
					if err := Serve(ctx, "srv0", l, nil); err != nil {
						panic(err)
					}
				}()
				time.Sleep(100 * time.Millisecond) // the socket is bound
				return func() { cancel(); <-ended }
			}
			// A request that must be answered retries for longer (a loaded machine schedules the
			// server late) than one that must not, which would only make the test slower.
			ask := func(retries int) func(string, net.HardwareAddr) (*nclient4.Lease, error) {
				return func(iface string, mac net.HardwareAddr) (*nclient4.Lease, error) {
					c, err := nclient4.New(iface, nclient4.WithHWAddr(mac), nclient4.WithTimeout(time.Second), nclient4.WithRetry(retries))
					if err != nil {
						return nil, err
					}
					defer c.Close()
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(retries+2)*time.Second)
					defer cancel()
					return c.Request(ctx)
				}
			}
			request, refused := ask(10), ask(2)
			stop := serve(lease("10.213.9.2/24", "10.213.9.1"))
			if r.first, err = request("cli0", guestMAC); err != nil {
				return err
			}
			if r.again, err = request("cli0", guestMAC); err != nil {
				return err
			}
			_, r.otherErr = refused("cli0", net.HardwareAddr{0x0a, 0x58, 0x0a, 0xd5, 0x09, 0x03})
			_, r.otherIfErr = refused("cli1", guestMAC)
			stop()
			stop = serve(lease("10.213.9.2/32", "169.254.1.1"))
			defer stop()
			r.slash32, err = request("cli0", guestMAC)
			return err
		}()
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	ack := r.first.ACK
	if !ack.YourIPAddr.Equal(net.ParseIP("10.213.9.2")) || ack.SubnetMask().String() != net.CIDRMask(24, 32).String() {
		t.Errorf("address %v/%v, want 10.213.9.2/24", ack.YourIPAddr, ack.SubnetMask())
	}
	if rt := ack.Router(); len(rt) != 1 || !rt[0].Equal(net.ParseIP("10.213.9.1")) {
		t.Errorf("router %v", rt)
	}
	if d := ack.DNS(); len(d) != 1 || !d[0].Equal(net.ParseIP("10.96.0.10")) {
		t.Errorf("DNS %v", d)
	}
	if s := ack.DomainSearch(); s == nil || len(s.Labels) != 2 || s.Labels[0] != "default.svc.cluster.local" {
		t.Errorf("search %v", s)
	}
	if ack.HostName() != "vm-1" {
		t.Errorf("hostname %q", ack.HostName())
	}
	if mtu := ack.GetOneOption(dhcpv4.OptionInterfaceMTU); len(mtu) != 2 || int(mtu[0])<<8|int(mtu[1]) != 1450 {
		t.Errorf("MTU option %v", mtu)
	}
	if lt := ack.IPAddressLeaseTime(0); lt < 24*time.Hour {
		t.Errorf("lease time %v, want one that outlives the pod", lt)
	}
	if len(ack.ClasslessStaticRoute()) != 0 {
		t.Errorf("a gateway inside the prefix needs no classless routes: %v", ack.ClasslessStaticRoute())
	}
	if !r.again.ACK.YourIPAddr.Equal(ack.YourIPAddr) {
		t.Errorf("a second run got %v, want the same %v", r.again.ACK.YourIPAddr, ack.YourIPAddr)
	}
	if r.otherErr == nil {
		t.Error("a client with another MAC got an answer")
	}
	if r.otherIfErr == nil {
		t.Error("a client on another interface (the pod's eth0) got an answer")
	}
	routes := r.slash32.ACK.ClasslessStaticRoute()
	if len(routes) != 2 || routes[0].Dest.String() != "169.254.1.1/32" || !routes[0].Router.Equal(net.IPv4zero) ||
		routes[1].Dest.String() != "0.0.0.0/0" || !routes[1].Router.Equal(net.ParseIP("169.254.1.1")) {
		t.Errorf("/32 pod: classless routes %v, want 169.254.1.1/32 on-link and the default via it", routes)
	}
}
