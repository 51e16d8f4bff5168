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
)

// PodInterface is the pod's network identity as the CNI plugin configured it.
type PodInterface struct {
	Name    string
	Index   int
	MAC     net.HardwareAddr
	MTU     int
	Addr    *net.IPNet // IPv4 address and prefix
	Gateway net.IP     // IPv4 default gateway; nil when there is no default route
	DNS     []net.IP   // IPv4 nameservers from resolv.conf, in order
	Search  []string
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
	if p.Addr == nil {
		return p, fmt.Errorf("pod interface %s has no IPv4 address: IPv6-only pods are not supported yet", ifName)
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return p, fmt.Errorf("routes: %w", err)
	}
	for _, r := range routes {
		if (r.Dst == nil || r.Dst.IP.IsUnspecified() && isZeroMask(r.Dst.Mask)) && r.Gw != nil {
			p.Gateway = r.Gw
			break
		}
	}
	if resolvConf == "" {
		return p, nil
	}
	p.DNS, p.Search, err = ReadResolvConf(resolvConf)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return p, err
	}
	return p, nil
}

func isZeroMask(m net.IPMask) bool {
	ones, _ := m.Size()
	return ones == 0
}

// ReadResolvConf returns the IPv4 nameservers and search domains of a resolv.conf.
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
			if ip := net.ParseIP(fields[1]); ip != nil && ip.To4() != nil {
				dns = append(dns, ip.To4())
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
