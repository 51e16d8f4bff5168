// Package dhcpserver answers one guest's DHCP on its tap: the runner hands the guest the pod's
// address, prefix, gateway, DNS, search domains, hostname and MTU, so a stock cloud image that
// configures itself by DHCP comes up with the pod IP. It answers only the guest's MAC, only on
// the interface it is given (never the pod's eth0), and the same answer every time, so a guest
// that reboots inside the same pod gets the same address.
package dhcpserver

import (
	"fmt"
	"net"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/rfc1035label"
)

// DefaultLeaseTime outlives any pod: the address is the pod's for the pod's whole life, and a
// renewal the guest never needs to make cannot fail.
const DefaultLeaseTime = 365 * 24 * time.Hour

// Lease is the one answer the server gives.
type Lease struct {
	MAC      net.HardwareAddr // the guest's; every other client is ignored
	Addr     *net.IPNet       // the pod's IPv4 address and prefix
	Gateway  net.IP           // the pod's default gateway
	DNS      []net.IP
	Search   []string
	Hostname string
	MTU      int
	ServerID net.IP // the address the answers come from (option 54)
	Duration time.Duration
}

// Validate says what is wrong with a lease before the server starts.
func (l Lease) Validate() error {
	switch {
	case len(l.MAC) != 6:
		return fmt.Errorf("dhcp: guest MAC %q is not a 48-bit Ethernet address", l.MAC)
	case l.Addr == nil || l.Addr.IP.To4() == nil:
		return fmt.Errorf("dhcp: the guest address %v is not IPv4 (an IPv6-only pod cannot be served)", l.Addr)
	case l.Gateway.To4() == nil:
		return fmt.Errorf("dhcp: gateway %v is not IPv4", l.Gateway)
	case l.ServerID.To4() == nil:
		return fmt.Errorf("dhcp: server identifier %v is not IPv4", l.ServerID)
	}
	return nil
}

// Reply is the answer to req, or false when there is none: another client's MAC, a message the
// server does not answer (RELEASE, DECLINE, a reply), or a REQUEST for an address other than the
// lease's, which gets a NAK.
func (l Lease) Reply(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, bool) {
	if req.OpCode != dhcpv4.OpcodeBootRequest || req.ClientHWAddr.String() != l.MAC.String() {
		return nil, false
	}
	ip := l.Addr.IP.To4()
	var typ dhcpv4.MessageType
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		typ = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		want := req.RequestedIPAddress()
		if want == nil || want.IsUnspecified() {
			want = req.ClientIPAddr
		}
		if want != nil && !want.IsUnspecified() && !want.Equal(ip) {
			nak, err := dhcpv4.NewReplyFromRequest(req, dhcpv4.WithMessageType(dhcpv4.MessageTypeNak),
				dhcpv4.WithOption(dhcpv4.OptServerIdentifier(l.ServerID)),
				dhcpv4.WithOption(dhcpv4.OptMessage(fmt.Sprintf("this guest's address is %s", ip))))
			return nak, err == nil
		}
		typ = dhcpv4.MessageTypeAck
	case dhcpv4.MessageTypeInform:
		ack, err := dhcpv4.NewReplyFromRequest(req, append([]dhcpv4.Modifier{dhcpv4.WithMessageType(dhcpv4.MessageTypeAck)}, l.config()...)...)
		return ack, err == nil
	default:
		return nil, false
	}
	mods := append([]dhcpv4.Modifier{
		dhcpv4.WithMessageType(typ),
		dhcpv4.WithYourIP(ip),
		dhcpv4.WithOption(dhcpv4.OptIPAddressLeaseTime(l.duration())),
		dhcpv4.WithOption(dhcpv4.OptRenewTimeValue(l.duration() / 2)),
		dhcpv4.WithOption(dhcpv4.OptRebindingTimeValue(l.duration() * 7 / 8)),
	}, l.config()...)
	resp, err := dhcpv4.NewReplyFromRequest(req, mods...)
	return resp, err == nil
}

// config are the options every answer carries.
func (l Lease) config() []dhcpv4.Modifier {
	mods := []dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(l.ServerID)),
		dhcpv4.WithNetmask(l.Addr.Mask),
		dhcpv4.WithRouter(l.Gateway),
	}
	if !l.Addr.Contains(l.Gateway) {
		// A gateway outside the prefix (a /32 pod address) is reachable only by an on-link
		// route to it; option 121 says so, and clients that read it ignore option 3 (RFC 3442),
		// so the default route goes in it too.
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptClasslessStaticRoute(
			&dhcpv4.Route{Dest: &net.IPNet{IP: l.Gateway.To4(), Mask: net.CIDRMask(32, 32)}, Router: net.IPv4zero.To4()},
			&dhcpv4.Route{Dest: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, Router: l.Gateway.To4()},
		)))
	}
	if len(l.DNS) > 0 {
		mods = append(mods, dhcpv4.WithDNS(l.DNS...))
	}
	if len(l.Search) > 0 {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptDomainSearch(&rfc1035label.Labels{Labels: l.Search})))
	}
	if l.Hostname != "" {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptHostName(l.Hostname)))
	}
	if l.MTU > 0 {
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionInterfaceMTU, []byte{byte(l.MTU >> 8), byte(l.MTU)}))
	}
	return mods
}

func (l Lease) duration() time.Duration {
	if l.Duration > 0 {
		return l.Duration
	}
	return DefaultLeaseTime
}
