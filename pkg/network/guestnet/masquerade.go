package guestnet

import (
	"crypto/sha256"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The masquerade network: a fixed /24 inside every pod, the same in every pod, so a guest
// configured once keeps its configuration when it moves to another pod (live migration). The
// pod's namespace holds the gateway on the bridge; the guest is the one other host on it. It is
// QEMU's user-network range (and KubeVirt's masquerade default), which cloud images tolerate.
var (
	MasqueradeNet       = &net.IPNet{IP: net.IPv4(10, 0, 2, 0).To4(), Mask: net.CIDRMask(24, 32)}
	MasqueradeGuestIP   = net.IPv4(10, 0, 2, 2).To4()
	MasqueradeGatewayIP = net.IPv4(10, 0, 2, 1).To4()
	// In a dual-stack pod, beside them (KubeVirt's IPv6 masquerade range too): a unique local
	// /120 with the same roles, NATed to the pod's IPv6 address.
	MasqueradeNet6       = &net.IPNet{IP: net.ParseIP("fd10:0:2::"), Mask: net.CIDRMask(120, 128)}
	MasqueradeGuestIP6   = net.ParseIP("fd10:0:2::2")
	MasqueradeGatewayIP6 = net.ParseIP("fd10:0:2::1")
)

// MasqueradeMACs are the guest's and the bridge's MACs in masquerade mode: unicast, locally
// administered, and derived from the VM's name alone, so a migration target computes the same
// ones and the guest's neighbour entry for its gateway stays right after the move. They never
// leave the pod (the pod interface is not in the bridge), so VMs of one name in two namespaces
// may share them.
func MasqueradeMACs(vmName string) (guest, bridge net.HardwareAddr) {
	guest, bridge = nameMAC("guest", vmName), nameMAC("bridge", vmName)
	if guest.String() == bridge.String() { // 2^-46; still never the same
		bridge[5] ^= 0x01
	}
	return guest, bridge
}

func nameMAC(role, name string) net.HardwareAddr {
	sum := sha256.Sum256([]byte("virtpod/masquerade/" + role + "\x00" + name))
	m := net.HardwareAddr(append([]byte(nil), sum[:6]...))
	m[0] = m[0]&^0x01 | 0x02
	return m
}

// MasqueradeGuest is the guest's addressing in masquerade mode: the fixed address and gateway,
// with the pod's DNS, search domains and MTU, of each family the pod has (an IPv6-only pod's
// guest has no IPv4 it could go out with).
func MasqueradeGuest(p PodInterface, guestMAC net.HardwareAddr) PodInterface {
	g := PodInterface{Name: "eth0", MAC: guestMAC, MTU: p.MTU, DNS: p.DNS, Search: p.Search}
	if p.Addr != nil {
		g.Addr, g.Gateway = &net.IPNet{IP: MasqueradeGuestIP, Mask: MasqueradeNet.Mask}, MasqueradeGatewayIP
	}
	if p.Addr6 != nil {
		g.Addr6 = &net.IPNet{IP: MasqueradeGuestIP6, Mask: MasqueradeNet6.Mask}
		g.Gateway6, g.DNS6 = MasqueradeGatewayIP6, p.DNS6
	}
	return g
}

// PlumbMasquerade wires the guest behind NAT, leaving the pod interface as the CNI plugin made it:
//
//	pod eth0 (pod IP, forwarding) ··· NAT (pkg/network/podnat) ··· bridge 10.0.2.1/24 (forwarding) ── tap ── guest 10.0.2.2
//
// The bridge and guest MACs come from MasqueradeMACs(vmName). IPv4 forwarding is switched on for
// the pod interface and the bridge through netlink (SetForwarding), since /proc/sys is read-only
// in a container. A bridge or tap left by an earlier, unfinished plumbing is replaced. The tap
// persists, owned by owner. The runner answers the guest's DHCP from 10.0.2.1 to 10.0.2.2 before
// the guest can answer ARP, so the guest's neighbour entry is made permanent here.
func PlumbMasquerade(p PodInterface, vmName, bridgeName, tapName string, owner TapOwner) (*Plumbing, error) {
	if err := MasqueradeOverlap(p); err != nil {
		return nil, err
	}
	if err := ensureTunDevice(); err != nil {
		return nil, err
	}
	link, err := netlink.LinkByIndex(p.Index)
	if err != nil {
		return nil, fmt.Errorf("pod interface %s: %w", p.Name, err)
	}
	guestMAC, bridgeMAC := MasqueradeMACs(vmName)
	pl := &Plumbing{Pod: p, Guest: MasqueradeGuest(p, guestMAC), GuestMAC: guestMAC, PodMAC: p.MAC, BridgeMAC: bridgeMAC,
		Bridge: bridgeName, Tap: tapName}
	for _, name := range []string{tapName, bridgeName} {
		if old, err := netlink.LinkByName(name); err == nil {
			if err := netlink.LinkDel(old); err != nil {
				return nil, fmt.Errorf("remove the earlier %s: %w", name, err)
			}
		}
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: bridgeName, MTU: p.MTU, HardwareAddr: bridgeMAC}}
	if err := netlink.LinkAdd(br); err != nil {
		return nil, fmt.Errorf("create bridge %s: %w (the node agent needs CAP_NET_ADMIN)", bridgeName, err)
	}
	// No link-local address of the kernel's making: in a dual-stack pod the bridge gets the
	// one its MAC forms, which is the same in every pod of the VM (a migrated guest keeps its
	// router), beside the IPv6 gateway.
	_ = netlink.LinkSetIP6AddrGenMode(br, 1) // IN6_ADDR_GEN_MODE_NONE
	var gws []*net.IPNet
	if p.Addr != nil {
		gws = append(gws, &net.IPNet{IP: MasqueradeGatewayIP, Mask: MasqueradeNet.Mask})
	}
	if p.Addr6 != nil {
		pl.Router6 = &Router6{IP: EUI64LinkLocal(bridgeMAC), MAC: bridgeMAC}
		gws = append(gws, &net.IPNet{IP: pl.Router6.IP, Mask: net.CIDRMask(64, 128)}, &net.IPNet{IP: MasqueradeGatewayIP6, Mask: MasqueradeNet6.Mask})
	}
	for _, gw := range gws {
		// Duplicate address detection would hold an IPv6 address back for a second.
		if err := netlink.AddrAdd(br, &netlink.Addr{IPNet: gw, Flags: unix.IFA_F_NODAD}); err != nil {
			return nil, fmt.Errorf("gateway address %s on %s: %w", gw, bridgeName, err)
		}
	}
	tapLink, err := pl.addTap(p.MTU, owner, br)
	if err != nil {
		return nil, err
	}
	for _, l := range []netlink.Link{tapLink, br} {
		if err := netlink.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("set %s up: %w", l.Attrs().Name, err)
		}
	}
	if p.Addr != nil {
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: br.Attrs().Index, Family: unix.AF_INET,
			State: netlink.NUD_PERMANENT, IP: MasqueradeGuestIP, HardwareAddr: guestMAC}); err != nil {
			return nil, fmt.Errorf("neighbour entry for the guest at %s: %w", MasqueradeGuestIP, err)
		}
		// Forwarding is judged on the interface a packet comes in on: the pod interface for
		// traffic to the guest's ports, the bridge for the guest's own.
		for _, l := range []netlink.Link{link, br} {
			if err := SetForwarding(l, true); err != nil {
				return nil, err
			}
		}
	}
	if p.Addr6 != nil {
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: br.Attrs().Index, Family: unix.AF_INET6,
			State: netlink.NUD_PERMANENT, IP: MasqueradeGuestIP6, HardwareAddr: guestMAC}); err != nil {
			return nil, fmt.Errorf("neighbour entry for the guest at %s: %w", MasqueradeGuestIP6, err)
		}
		if err := SetForwarding6(link.Attrs().Name); err != nil {
			return nil, err
		}
	}
	return pl, nil
}

// MasqueradeOverlap refuses a pod whose own network reaches into the masquerade network: its
// traffic there would go to the bridge instead.
func MasqueradeOverlap(p PodInterface) error {
	if p.Addr == nil && p.Addr6 == nil {
		return fmt.Errorf("pod interface %s has no address", p.Name)
	}
	if p.Addr != nil {
		inside := []net.IP{p.Addr.IP, p.Gateway}
		inside = append(inside, p.DNS...)
		for _, ip := range inside {
			if ip != nil && MasqueradeNet.Contains(ip) {
				return fmt.Errorf("the pod network uses %s, inside the masquerade network %s that the guest lives on: use network mode Pod for this VM", ip, MasqueradeNet)
			}
		}
		if p.Addr.Contains(MasqueradeGuestIP) {
			return fmt.Errorf("the pod's subnet %s contains the masquerade network %s that the guest lives on: use network mode Pod for this VM", p.Addr, MasqueradeNet)
		}
	}
	if p.Addr6 == nil {
		return nil
	}
	for _, ip := range append([]net.IP{p.Addr6.IP, p.Gateway6}, p.DNS6...) {
		if ip != nil && MasqueradeNet6.Contains(ip) {
			return fmt.Errorf("the pod network uses %s, inside the masquerade network %s that the guest lives on: use network mode Pod for this VM", ip, MasqueradeNet6)
		}
	}
	if p.Addr6.Contains(MasqueradeGuestIP6) {
		return fmt.Errorf("the pod's IPv6 subnet %s contains the masquerade network %s that the guest lives on: use network mode Pod for this VM", p.Addr6, MasqueradeNet6)
	}
	return nil
}
