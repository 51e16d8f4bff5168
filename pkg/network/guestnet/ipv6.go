package guestnet

import (
	"fmt"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// EUI64LinkLocal is the link-local address a host forms from its MAC (RFC 4291, appendix A):
// the guest's, which the spoof guard lets it use, and a router's stand-in when the pod's IPv6
// gateway is a global address (a router advertisement must come from a link-local one).
func EUI64LinkLocal(mac net.HardwareAddr) net.IP {
	if len(mac) != 6 {
		return nil
	}
	ip := make(net.IP, net.IPv6len)
	ip[0], ip[1] = 0xfe, 0x80
	ip[8], ip[9], ip[10] = mac[0]^0x02, mac[1], mac[2]
	ip[11], ip[12] = 0xff, 0xfe
	ip[13], ip[14], ip[15] = mac[3], mac[4], mac[5]
	return ip
}

// router6 is the router the guest is told of: the pod's IPv6 gateway when it is link-local;
// when it is global (the bridge CNI plugin's), the link-local address its MAC forms, which the
// runner answers for with that MAC (pkg/network/ipv6serve), so the guest's frames reach the gateway.
func (p PodInterface) router6() *Router6 {
	if p.Addr6 == nil || p.Gateway6 == nil || len(p.Gateway6MAC) != 6 {
		return nil
	}
	ip := p.Gateway6
	if !ip.IsLinkLocalUnicast() {
		ip = EUI64LinkLocal(p.Gateway6MAC)
	}
	return &Router6{IP: ip, MAC: p.Gateway6MAC}
}

// neighbourWait bounds how long resolveNeighbour waits for the gateway to answer.
const neighbourWait = 3 * time.Second

// resolveNeighbour returns the MAC of ip on link, asking for it (a datagram to the discard
// port makes the kernel solicit it) when the neighbour table does not hold it yet.
func resolveNeighbour(link netlink.Link, ip net.IP) (net.HardwareAddr, error) {
	if mac := neighbour(link, ip); mac != nil {
		return mac, nil
	}
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("resolve the IPv6 gateway %s: %w", ip, err)
	}
	defer unix.Close(fd)
	to := &unix.SockaddrInet6{Port: 9, Addr: [16]byte(ip.To16())}
	if ip.IsLinkLocalUnicast() {
		to.ZoneId = uint32(link.Attrs().Index)
	}
	deadline := time.Now().Add(neighbourWait)
	for time.Now().Before(deadline) {
		_ = unix.Sendto(fd, []byte{0}, 0, to)
		for range 10 {
			time.Sleep(20 * time.Millisecond)
			if mac := neighbour(link, ip); mac != nil {
				return mac, nil
			}
		}
	}
	return nil, fmt.Errorf("the pod's IPv6 gateway %s did not answer neighbour solicitation on %s within %s: the guest needs its MAC to route through it", ip, link.Attrs().Name, neighbourWait)
}

func neighbour(link netlink.Link, ip net.IP) net.HardwareAddr {
	neighs, err := netlink.NeighList(link.Attrs().Index, netlink.FAMILY_V6)
	if err != nil {
		return nil
	}
	const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
	for _, n := range neighs {
		if n.IP.Equal(ip) && n.State&usable != 0 && len(n.HardwareAddr) == 6 {
			return n.HardwareAddr
		}
	}
	return nil
}
