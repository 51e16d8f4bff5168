// Package guestnet hands a pod's network identity to its guest. Inside the pod's network
// namespace it reads the pod interface (address, gateway, MAC, MTU, DNS), then moves the
// address off that interface and bridges it with a tap device, so the guest, not the pod's
// namespace, answers at the pod IP. Everything is done through netlink; nothing is exec'd.
package guestnet

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// PodInterface is the pod's network identity as the CNI plugin configured it.
type PodInterface struct {
	Name    string
	Index   int
	MAC     net.HardwareAddr
	MTU     int
	Addr    *net.IPNet // IPv4 address and prefix; nil in an IPv6-only pod
	Gateway net.IP     // IPv4 default gateway; nil when there is no default route
	DNS     []net.IP   // IPv4 nameservers from resolv.conf, in order
	Search  []string
	// Addr6 is the pod's global IPv6 address and prefix in a dual-stack pod; nil in an
	// IPv4-only one. Gateway6 is its IPv6 default route's next hop (often link-local), DNS6
	// its IPv6 nameservers.
	Addr6    *net.IPNet `json:",omitempty"`
	Gateway6 net.IP     `json:",omitempty"`
	DNS6     []net.IP   `json:",omitempty"`
	// Gateway6MAC is the IPv6 gateway's MAC, which Plumb resolves while the pod still has its
	// address (afterwards the pod's namespace has none to ask from); the masquerade network
	// needs none.
	Gateway6MAC net.HardwareAddr `json:",omitempty"`
}

// Discover reads the interface named ifName and the resolver configuration at resolvConf ("":
// none; the node agent, which discovers the interface, cannot see the pod's resolv.conf).
func Discover(ifName, resolvConf string) (PodInterface, error) {
	link, err := netlink.LinkByName(ifName)
	if err != nil {
		return PodInterface{}, fmt.Errorf("pod interface %s: %w", ifName, err)
	}
	a := link.Attrs()
	p := PodInterface{Name: a.Name, Index: a.Index, MAC: a.HardwareAddr, MTU: a.MTU}
	if len(p.MAC) != 6 {
		return p, fmt.Errorf("pod interface %s has no Ethernet MAC (is it a layer-3 device?): the guest needs an Ethernet interface to take over", ifName)
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return p, fmt.Errorf("addresses of %s: %w", ifName, err)
	}
	for _, ad := range addrs {
		if ad.IP.IsGlobalUnicast() {
			p.Addr = ad.IPNet
			break
		}
	}
	if p.Addr != nil {
		if p.Gateway, err = defaultGateway(netlink.FAMILY_V4); err != nil {
			return p, err
		}
	}
	addrs6, err := netlink.AddrList(link, netlink.FAMILY_V6)
	if err != nil {
		return p, fmt.Errorf("IPv6 addresses of %s: %w", ifName, err)
	}
	for _, ad := range addrs6 {
		if ad.IP.IsGlobalUnicast() && ad.Flags&unix.IFA_F_TENTATIVE == 0 {
			p.Addr6 = ad.IPNet
			break
		}
	}
	if p.Addr == nil && p.Addr6 == nil {
		return p, fmt.Errorf("pod interface %s has no global IPv4 or IPv6 address", ifName)
	}
	if p.Addr6 != nil {
		if p.Gateway6, err = defaultGateway(netlink.FAMILY_V6); err != nil {
			return p, err
		}
	}
	if resolvConf == "" {
		return p, nil
	}
	dns, search, err := ReadResolvConf(resolvConf)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return p, err
	}
	p.setResolver(dns, search)
	return p, nil
}

// defaultGateway is the next hop of the namespace's default route of family; nil with none.
func defaultGateway(family int) (net.IP, error) {
	routes, err := netlink.RouteList(nil, family)
	if err != nil {
		return nil, fmt.Errorf("routes: %w", err)
	}
	for _, r := range routes {
		if (r.Dst == nil || r.Dst.IP.IsUnspecified() && isZeroMask(r.Dst.Mask)) && r.Gw != nil {
			return r.Gw, nil
		}
	}
	return nil, nil
}

// setResolver keeps the nameservers of the families the pod has, each in its own list.
func (p *PodInterface) setResolver(dns []net.IP, search []string) {
	p.DNS, p.DNS6, p.Search = nil, nil, search
	for _, d := range dns {
		switch {
		case d.To4() != nil:
			p.DNS = append(p.DNS, d.To4())
		case p.Addr6 != nil:
			p.DNS6 = append(p.DNS6, d)
		}
	}
}

func isZeroMask(m net.IPMask) bool {
	ones, _ := m.Size()
	return ones == 0
}

// ReadResolvConf returns the nameservers (of both families) and search domains of a
// resolv.conf.
func ReadResolvConf(path string) ([]net.IP, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var dns []net.IP
	var search []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "nameserver":
			// A link-local nameserver (fe80::1%eth0) names the pod's interface, which the
			// guest does not have: skipped.
			if ip := net.ParseIP(fields[1]); ip != nil && !ip.IsLinkLocalUnicast() {
				dns = append(dns, ip)
			}
		case "search":
			search = fields[1:]
		}
	}
	return dns, search, sc.Err()
}

// KernelIPArg renders the kernel's ip= argument that gives the guest the pod's address:
// ip=<client>::<gateway>:<netmask>:<hostname>:eth0:off[:<dns0>[:<dns1>]]. Search domains have no
// place in it. hostname is dropped when it is not a valid host name, since ':' or spaces would
// change the argument's meaning.
func (p PodInterface) KernelIPArg(hostname string) string {
	if p.Addr == nil {
		return "" // ip= is IPv4's; an IPv6-only guest takes its address from DHCPv6
	}
	gw := ""
	if p.Gateway != nil {
		gw = p.Gateway.String()
	}
	if !validHostname(hostname) {
		hostname = ""
	}
	arg := fmt.Sprintf("ip=%s::%s:%s:%s:eth0:off", p.Addr.IP, gw, net.IP(p.Addr.Mask), hostname)
	for i, d := range p.DNS {
		if i == 2 {
			break
		}
		arg += ":" + d.String()
	}
	return arg
}

func validHostname(h string) bool {
	if h == "" || len(h) > 63 {
		return false
	}
	for i, c := range h {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(h)-1
		if !ok {
			return false
		}
	}
	return true
}
