package guestnet

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RelayIP is the pod namespace's own address on the bridge, from which the runner reaches the
// guest at the pod IP (its port relay, docs/runner.md). It is link-local, held as a /32 with no
// subnet route, so it routes nothing but itself, and it avoids the link-local addresses
// Kubernetes networks use: 169.254.1.1 (Calico's pod gateway), 169.254.20.10 and 169.254.25.10
// (node-local DNS caches), 169.254.169.254 and neighbours (cloud metadata), 169.254.170.2 (ECS).
var RelayIP = net.IPv4(169, 254, 75, 1).To4()

// RelayIP6 is RelayIP's counterpart in an IPv6-only pod: a link-local address on the bridge
// (the same digits), which the guest reaches on its own link with no route and no relay rule.
var RelayIP6 = net.ParseIP("fe80::a9fe:4b01")

// AddRelay gives the pod's namespace a path to the guest without taking anything from it:
//
//   - RelayIP/32 on the bridge (no subnet route);
//   - a route to the pod IP through the bridge with RelayIP as source;
//   - a permanent neighbour entry for the pod IP at the guest's MAC, so the namespace never ARPs
//     for it on the pod network;
//   - a static, sticky forwarding entry for the guest's MAC on the tap, so the bridge sends
//     frames for the guest to the tap only: it never floods the namespace's frames to the pod
//     network, and a frame of the guest's coming back from the pod network (a hairpin bridge,
//     as the bridge CNI plugin's hairpinMode, returns its broadcasts) cannot move the entry to
//     the pod interface, which would cut the guest off from its gateway's replies.
//
// The guest's replies come back to the bridge by spoofguard's relay rule on the tap.
func (pl *Plumbing) AddRelay() error {
	br, err := netlink.LinkByName(pl.Bridge)
	if err != nil {
		return fmt.Errorf("bridge %s: %w", pl.Bridge, err)
	}
	tap, err := netlink.LinkByName(pl.Tap)
	if err != nil {
		return fmt.Errorf("tap %s: %w", pl.Tap, err)
	}
	relay, podIP, family, bits := RelayIP, pl.Pod.Addr, unix.AF_INET, 32
	if podIP == nil { // IPv6-only
		relay, podIP, family, bits = RelayIP6, pl.Pod.Addr6, unix.AF_INET6, 128
	}
	host := net.CIDRMask(bits, bits)
	// No duplicate address detection: the address must be usable at once (and it is ours).
	if err := netlink.AddrReplace(br, &netlink.Addr{IPNet: &net.IPNet{IP: relay, Mask: host}, Scope: unix.RT_SCOPE_LINK, Flags: unix.IFA_F_NODAD}); err != nil {
		return fmt.Errorf("relay address %s on %s: %w", relay, pl.Bridge, err)
	}
	if err := netlink.RouteReplace(&netlink.Route{LinkIndex: br.Attrs().Index, Dst: &net.IPNet{IP: podIP.IP, Mask: host},
		Src: relay, Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("route to the guest at %s: %w", podIP.IP, err)
	}
	if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: br.Attrs().Index, Family: family,
		State: netlink.NUD_PERMANENT, IP: podIP.IP, HardwareAddr: pl.GuestMAC}); err != nil {
		return fmt.Errorf("neighbour entry for the guest at %s: %w", podIP.IP, err)
	}
	// NUD_NOARP is the bridge's "static": never ages out (NUD_PERMANENT would mean the bridge's
	// own address); NTF_STICKY: learning never moves it to another port.
	if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: tap.Attrs().Index, Family: unix.AF_BRIDGE,
		State: netlink.NUD_NOARP, Flags: netlink.NTF_MASTER | netlink.NTF_STICKY, HardwareAddr: pl.GuestMAC}); err != nil {
		return fmt.Errorf("forwarding entry for the guest's MAC on %s: %w", pl.Tap, err)
	}
	return nil
}
