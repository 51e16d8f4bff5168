// Package ipv6serve gives a guest its IPv6 configuration from the runner, which has no address
// on the pod network of its own: router advertisements (the default route, the on-link prefix,
// the MTU and DNS), DHCPv6 (the pod's address, DNS and search domains) and neighbour
// advertisements for the router it names. It speaks raw frames on a packet socket bound to the
// guest's tap, which the node agent opens (OpenLink, CAP_NET_RAW) and hands to the runner: what
// it writes reaches the guest alone, never the pod network, and it hears only what the guest
// sends to it, which the spoof guard keeps off the pod network.
//
// The router is the pod's IPv6 gateway. When the gateway is a link-local address the guest is
// told of it as it is; a router advertisement must come from a link-local address, so when it is
// global the guest is told of the link-local address the gateway's MAC forms (EUI-64), and the
// server answers the guest's neighbour solicitations for it with the gateway's MAC: the guest's
// frames go to the gateway either way.
package ipv6serve

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/mdlayher/ndp"
)

// Lifetimes of what the guest is told. Router advertisements repeat every AdvertiseEvery, well
// inside the router's lifetime, since a guest asks for one only when its interface comes up.
const (
	RouterLifetime = 30 * time.Minute
	AdvertiseEvery = 5 * time.Minute
	leaseLifetime  = 24 * time.Hour
	dnsLifetime    = RouterLifetime
)

// Config is what the guest is given.
type Config struct {
	GuestMAC  net.HardwareAddr
	Addr      *net.IPNet // the guest's IPv6 address and the pod's prefix (on-link)
	RouterIP  net.IP     // link-local
	RouterMAC net.HardwareAddr
	DNS       []net.IP
	Search    []string
	MTU       int
}

// Validate says what is wrong with c, naming the field.
func (c Config) Validate() error {
	switch {
	case len(c.GuestMAC) != 6:
		return fmt.Errorf("ipv6: guest MAC %q is not a 48-bit Ethernet address", c.GuestMAC)
	case c.Addr == nil || c.Addr.IP.To4() != nil || !c.Addr.IP.IsGlobalUnicast():
		return fmt.Errorf("ipv6: guest address %v is not a global IPv6 address", c.Addr)
	case !c.RouterIP.IsLinkLocalUnicast() || c.RouterIP.To4() != nil:
		return fmt.Errorf("ipv6: router %v is not an IPv6 link-local address", c.RouterIP)
	case len(c.RouterMAC) != 6:
		return fmt.Errorf("ipv6: router MAC %q is not a 48-bit Ethernet address", c.RouterMAC)
	}
	for _, d := range c.DNS {
		if d.To4() != nil || d.To16() == nil {
			return fmt.Errorf("ipv6: nameserver %v is not an IPv6 address", d)
		}
	}
	return nil
}

var allNodes = netip.MustParseAddr("ff02::1")

func addr(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip.To16())
	return a
}

// Answer is the server's reply to one frame from the guest, and what it answered ("router
// advertisement", "neighbour advertisement", "dhcpv6 <type>"); nil for a frame it does not
// answer (anything not from the guest's MAC, or not asking it).
func (c Config) Answer(f []byte) ([]byte, string) {
	p, err := parseFrame(f)
	if err != nil || p.srcMAC.String() != c.GuestMAC.String() {
		return nil, ""
	}
	switch p.next {
	case protoICMPv6:
		return c.answerICMP(p)
	case protoUDP:
		return c.answerDHCP(p)
	}
	return nil, ""
}

func (c Config) answerICMP(p packet) ([]byte, string) {
	m, err := ndp.ParseMessage(p.payload)
	if err != nil {
		return nil, ""
	}
	// A reply goes back to the asker's address, or to all nodes from one with none yet.
	to := p.src
	if to.IsUnspecified() {
		to = allNodes
	}
	switch m := m.(type) {
	case *ndp.RouterSolicitation:
		return c.advertise(to), "router advertisement"
	case *ndp.NeighborSolicitation:
		if m.TargetAddress != addr(c.RouterIP) {
			return nil, ""
		}
		na := &ndp.NeighborAdvertisement{
			Router: true, Solicited: !p.src.IsUnspecified(), Override: true, TargetAddress: addr(c.RouterIP),
			Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: c.RouterMAC}},
		}
		return c.icmp(to, na), "neighbour advertisement"
	}
	return nil, ""
}

// Advertisement is an unsolicited router advertisement, to all nodes (the guest alone hears it).
func (c Config) Advertisement() []byte { return c.advertise(allNodes) }

func (c Config) advertise(to netip.Addr) []byte {
	ones, _ := c.Addr.Mask.Size()
	opts := []ndp.Option{
		&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: c.RouterMAC},
		// On-link but not for autoconfiguration: the pod's address is the one DHCPv6 gives.
		&ndp.PrefixInformation{PrefixLength: uint8(ones), OnLink: true, ValidLifetime: leaseLifetime, PreferredLifetime: leaseLifetime,
			Prefix: addr(c.Addr.IP.Mask(c.Addr.Mask))},
	}
	if c.MTU >= 1280 {
		opts = append(opts, ndp.NewMTU(uint32(c.MTU)))
	}
	if len(c.DNS) > 0 {
		rdnss := &ndp.RecursiveDNSServer{Lifetime: dnsLifetime}
		for _, d := range c.DNS {
			rdnss.Servers = append(rdnss.Servers, addr(d))
		}
		opts = append(opts, rdnss)
	}
	if len(c.Search) > 0 {
		opts = append(opts, &ndp.DNSSearchList{Lifetime: dnsLifetime, DomainNames: c.Search})
	}
	ra := &ndp.RouterAdvertisement{
		CurrentHopLimit: 64, ManagedConfiguration: true, OtherConfiguration: true,
		RouterLifetime: RouterLifetime, Options: opts,
	}
	return c.icmp(to, ra)
}

func (c Config) icmp(to netip.Addr, m ndp.Message) []byte {
	from := addr(c.RouterIP)
	b, err := ndp.MarshalMessageChecksum(m, from, to)
	if err != nil {
		return nil // the messages built here always marshal; Validate checked their parts
	}
	return frame(c.dstMAC(to), c.RouterMAC, from, to, protoICMPv6, 255, b)
}

func (c Config) dstMAC(to netip.Addr) net.HardwareAddr {
	if to.IsMulticast() {
		return multicastMAC(to)
	}
	return c.GuestMAC
}

func (c Config) answerDHCP(p packet) ([]byte, string) {
	if len(p.payload) < 8 || int(p.payload[2])<<8|int(p.payload[3]) != portServer {
		return nil, ""
	}
	msg, err := dhcpv6.MessageFromBytes(p.payload[8:])
	if err != nil {
		return nil, ""
	}
	serverID := &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: c.RouterMAC}
	// A request for another server's offer is that server's to answer.
	if sid := msg.Options.ServerID(); sid != nil && !sid.Equal(serverID) {
		return nil, ""
	}
	mods := []dhcpv6.Modifier{dhcpv6.WithServerID(serverID)}
	if len(c.DNS) > 0 {
		mods = append(mods, dhcpv6.WithDNS(c.DNS...))
	}
	if len(c.Search) > 0 {
		mods = append(mods, dhcpv6.WithDomainSearchList(c.Search...))
	}
	if ia := msg.Options.OneIANA(); ia != nil {
		switch msg.Type() {
		case dhcpv6.MessageTypeSolicit, dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind:
			mods = append(mods, dhcpv6.WithOption(&dhcpv6.OptIANA{
				IaId: ia.IaId, T1: leaseLifetime / 2, T2: leaseLifetime * 4 / 5,
				Options: dhcpv6.IdentityOptions{Options: []dhcpv6.Option{&dhcpv6.OptIAAddress{
					IPv6Addr: c.Addr.IP, PreferredLifetime: leaseLifetime, ValidLifetime: leaseLifetime}}},
			}))
		}
	}
	var reply *dhcpv6.Message
	switch msg.Type() {
	case dhcpv6.MessageTypeSolicit:
		if msg.GetOneOption(dhcpv6.OptionRapidCommit) != nil {
			reply, err = dhcpv6.NewReplyFromMessage(msg, mods...)
		} else {
			reply, err = dhcpv6.NewAdvertiseFromSolicit(msg, mods...)
		}
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind, dhcpv6.MessageTypeConfirm,
		dhcpv6.MessageTypeInformationRequest, dhcpv6.MessageTypeRelease:
		reply, err = dhcpv6.NewReplyFromMessage(msg, mods...)
	default:
		return nil, ""
	}
	if err != nil {
		return nil, ""
	}
	from, to := addr(c.RouterIP), p.src
	if to.IsUnspecified() {
		return nil, "" // a DHCPv6 client always speaks from its link-local address
	}
	u := udp(from, to, portServer, portClient, reply.ToBytes())
	return frame(c.GuestMAC, c.RouterMAC, from, to, protoUDP, 64, u), "dhcpv6 " + reply.Type().String() + " to " + msg.Type().String()
}
