package guestnet

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Default device names, short enough for IFNAMSIZ and recognisable in `ip link` output.
const (
	DefaultBridge = "vp-br0"
	DefaultTap    = "vp-tap0"
	tunDevice     = "/dev/net/tun"
)

// TapOwner is the user and group the persistent tap belongs to (TUNSETOWNER, TUNSETGROUP): the
// runner's, so that it opens the tap for the hypervisor with no capability at all.
type TapOwner struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// Plumbing is the result of Plumb: what the node agent made in the pod's namespace, handed to
// the runner (as JSON) so it can open the tap and serve the guest.
type Plumbing struct {
	Pod PodInterface // the interface as it was before Plumb
	// Guest is the guest's own addressing, for its DHCP lease and ip= argument: the pod's in
	// pod mode, the fixed masquerade network's in masquerade mode.
	Guest    PodInterface
	GuestMAC net.HardwareAddr // pod mode: the pod interface's original MAC; masquerade: MasqueradeMACs
	PodMAC   net.HardwareAddr // the pod interface's MAC (a new, locally administered one in pod mode)
	// BridgeMAC is the bridge's own MAC: frames to it reach the pod's namespace (AddRelay).
	BridgeMAC net.HardwareAddr
	Bridge    string
	Tap       string
	// TapFile is the runner's open queue of the tap (OpenTap), handed to QEMU; never sent.
	TapFile *os.File `json:"-"`
	// Router6 is the guest's IPv6 router in a dual-stack pod: the pod's IPv6 gateway, by a
	// link-local address and the MAC the agent resolved it to. nil without an IPv6 default route.
	Router6 *Router6 `json:",omitempty"`
	// Link6 is the runner's raw link to the guest for its IPv6 configuration (pkg/network/ipv6serve): a
	// packet socket on the tap the agent opened (CAP_NET_RAW) and handed over beside the JSON.
	Link6 *os.File `json:"-"`
}

// Router6 is the router the guest's IPv6 default route goes through.
type Router6 struct {
	IP  net.IP           // link-local: what a router advertisement comes from
	MAC net.HardwareAddr // where the guest's frames to it go
}

// WithResolver gives the guest the pod's DNS servers and search domains, which the runner
// reads from the pod's resolv.conf (the agent, in another mount namespace, cannot).
func (pl *Plumbing) WithResolver(dns []net.IP, search []string) {
	pl.Pod.setResolver(dns, search)
	pl.Guest.setResolver(dns, search)
}

// aliasPrefix marks the bridge's alias (IFLA_IFALIAS) that keeps the pod interface as the CNI
// plugin made it: once its address and MAC are moved, nothing else remembers them, and an
// agent that died half-way must finish the same plumbing, not a new one.
const aliasPrefix = "virtpod:"

type savedPod struct {
	MAC         string `json:"mac"`
	Addr        string `json:"addr,omitempty"`
	Gateway     string `json:"gw,omitempty"`
	Addr6       string `json:"addr6,omitempty"`
	Gateway6    string `json:"gw6,omitempty"`
	Gateway6MAC string `json:"gw6mac,omitempty"`
}

// Resume returns p with the identity an earlier Plumb saved on bridgeName, when that bridge
// exists: the pod interface then has no address of its own left to discover.
func Resume(p PodInterface, bridgeName string) (PodInterface, bool, error) {
	br, err := netlink.LinkByName(bridgeName)
	if err != nil {
		return p, false, nil
	}
	alias, ok := strings.CutPrefix(br.Attrs().Alias, aliasPrefix)
	if !ok {
		return p, false, nil
	}
	var s savedPod
	if err := json.Unmarshal([]byte(alias), &s); err != nil {
		return p, false, fmt.Errorf("bridge %s: the saved pod interface %q: %w", bridgeName, alias, err)
	}
	mac, err := net.ParseMAC(s.MAC)
	if err != nil {
		return p, false, fmt.Errorf("bridge %s: saved MAC: %w", bridgeName, err)
	}
	p.MAC = mac
	if s.Addr != "" {
		ip, ipnet, err := net.ParseCIDR(s.Addr)
		if err != nil {
			return p, false, fmt.Errorf("bridge %s: saved address: %w", bridgeName, err)
		}
		p.Addr, p.Gateway = &net.IPNet{IP: ip.To4(), Mask: ipnet.Mask}, net.ParseIP(s.Gateway).To4()
	}
	if s.Addr6 == "" {
		return p, true, nil
	}
	ip6, ipnet6, err := net.ParseCIDR(s.Addr6)
	if err != nil {
		return p, false, fmt.Errorf("bridge %s: saved IPv6 address: %w", bridgeName, err)
	}
	p.Addr6, p.Gateway6 = &net.IPNet{IP: ip6, Mask: ipnet6.Mask}, net.ParseIP(s.Gateway6)
	if s.Gateway6MAC != "" {
		if p.Gateway6MAC, err = net.ParseMAC(s.Gateway6MAC); err != nil {
			return p, false, fmt.Errorf("bridge %s: saved IPv6 gateway MAC: %w", bridgeName, err)
		}
	}
	return p, true, nil
}

func saveAlias(br netlink.Link, p PodInterface) error {
	s := savedPod{MAC: p.MAC.String()}
	if p.Addr != nil {
		s.Addr = p.Addr.String()
	}
	if p.Gateway != nil {
		s.Gateway = p.Gateway.String()
	}
	if p.Addr6 != nil {
		s.Addr6 = p.Addr6.String()
		if p.Gateway6 != nil {
			s.Gateway6 = p.Gateway6.String()
		}
	}
	if p.Gateway6MAC != nil {
		s.Gateway6MAC = p.Gateway6MAC.String()
	}
	b, _ := json.Marshal(s)
	if err := netlink.LinkSetAlias(br, aliasPrefix+string(b)); err != nil {
		return fmt.Errorf("record the pod interface on %s: %w", br.Attrs().Name, err)
	}
	return nil
}

// Plumb rewires the pod interface so the guest owns the pod's IP:
//
//	pod eth0 (new local MAC, no IP) ── bridge ── tap ── guest eth0 (pod MAC, pod IP)
//
// The guest gets the original MAC so the neighbour entries the pod network already holds for
// the pod IP stay right, and the pod interface gets a new locally administered MAC so the two
// never collide on the bridge. The tap persists, owned by owner. Plumb runs in the pod's
// namespace (the node agent's thread there) and may run again over its own half-done work:
// p then comes from Resume.
func Plumb(p PodInterface, bridgeName, tapName string, owner TapOwner) (*Plumbing, error) {
	if err := ensureTunDevice(); err != nil {
		return nil, err
	}
	link, err := netlink.LinkByIndex(p.Index)
	if err != nil {
		return nil, fmt.Errorf("pod interface %s: %w", p.Name, err)
	}
	if p.Gateway6 != nil && p.Gateway6MAC == nil { // not Resume's, which saved it
		if p.Gateway6MAC, err = resolveNeighbour(link, p.Gateway6); err != nil {
			return nil, err
		}
	}
	var br netlink.Link
	if old, err := netlink.LinkByName(bridgeName); err == nil {
		br = old // Resume's: its alias already holds p
	} else {
		bridgeMAC, err := randomLocalMAC(p.MAC)
		if err != nil {
			return nil, err
		}
		nb := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: bridgeName, MTU: p.MTU, HardwareAddr: bridgeMAC}}
		if err := netlink.LinkAdd(nb); err != nil {
			return nil, fmt.Errorf("create bridge %s: %w (the node agent needs CAP_NET_ADMIN)", bridgeName, err)
		}
		if br, err = netlink.LinkByName(bridgeName); err != nil {
			return nil, fmt.Errorf("bridge %s: %w", bridgeName, err)
		}
		if err := saveAlias(br, p); err != nil {
			return nil, err
		}
	}
	// The bridge and tap carry the guest's traffic only: no IPv6 link-local address of their
	// own, so the pod namespace never speaks on the pod network with their MACs.
	_ = netlink.LinkSetIP6AddrGenMode(br, 1) // IN6_ADDR_GEN_MODE_NONE
	podMAC := link.Attrs().HardwareAddr
	if podMAC.String() == p.MAC.String() {
		if podMAC, err = randomLocalMAC(p.MAC); err != nil {
			return nil, err
		}
	}
	pl := &Plumbing{Pod: p, Guest: p, GuestMAC: p.MAC, PodMAC: podMAC, BridgeMAC: br.Attrs().HardwareAddr, Bridge: bridgeName, Tap: tapName,
		Router6: p.router6()}

	family := netlink.FAMILY_V4
	if p.Addr6 != nil {
		// The guest takes the IPv6 identity too, link-local included: the pod's namespace
		// keeps no IPv6 address on the pod network, and makes none when eth0 comes up again.
		family = netlink.FAMILY_ALL
		_ = netlink.LinkSetIP6AddrGenMode(link, 1)
	}
	addrs, err := netlink.AddrList(link, family)
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", p.Name, err)
	}
	for _, a := range addrs {
		if err := netlink.AddrDel(link, &a); err != nil {
			return nil, fmt.Errorf("move %s off %s: %w", a.IPNet, p.Name, err)
		}
	}
	if link.Attrs().HardwareAddr.String() != podMAC.String() {
		if err := netlink.LinkSetDown(link); err != nil {
			return nil, fmt.Errorf("set %s down: %w", p.Name, err)
		}
		if err := netlink.LinkSetHardwareAddr(link, podMAC); err != nil {
			return nil, fmt.Errorf("give %s a new MAC: %w", p.Name, err)
		}
	}
	if err := netlink.LinkSetMaster(link, br); err != nil {
		return nil, fmt.Errorf("add %s to bridge %s: %w", p.Name, bridgeName, err)
	}
	tapLink, err := pl.addTap(p.MTU, owner, br)
	if err != nil {
		return nil, err
	}
	for _, l := range []netlink.Link{tapLink, link, br} {
		if err := netlink.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("set %s up: %w", l.Attrs().Name, err)
		}
	}
	return pl, nil
}

// addTap creates pl.Tap in the bridge br, persistent and owned by owner, replacing one an
// earlier, unfinished plumbing left (no hypervisor holds it before the runner hears back).
func (pl *Plumbing) addTap(mtu int, owner TapOwner, br netlink.Link) (netlink.Link, error) {
	if old, err := netlink.LinkByName(pl.Tap); err == nil {
		if err := netlink.LinkDel(old); err != nil {
			return nil, fmt.Errorf("remove the earlier tap %s: %w", pl.Tap, err)
		}
	}
	tap := &netlink.Tuntap{
		LinkAttrs: netlink.LinkAttrs{Name: pl.Tap, MTU: mtu},
		Mode:      netlink.TUNTAP_MODE_TAP,
		// VNET_HDR lets QEMU's virtio-net pass checksum and segmentation offloads through.
		Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR,
		Owner: owner.UID, Group: owner.GID,
	}
	if err := netlink.LinkAdd(tap); err != nil {
		return nil, fmt.Errorf("create tap %s: %w", pl.Tap, err)
	}
	tapLink, err := netlink.LinkByName(pl.Tap)
	if err != nil {
		return nil, fmt.Errorf("tap %s: %w", pl.Tap, err)
	}
	_ = netlink.LinkSetIP6AddrGenMode(tapLink, 1)
	// Creating a tap takes no MTU: set it, or it stays 1500 on an overlay's smaller one.
	if mtu > 0 && tapLink.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(tapLink, mtu); err != nil {
			return nil, fmt.Errorf("MTU %d on tap %s: %w", mtu, pl.Tap, err)
		}
	}
	if err := netlink.LinkSetMaster(tapLink, br); err != nil {
		return nil, fmt.Errorf("add tap %s to bridge: %w", pl.Tap, err)
	}
	return tapLink, nil
}

// OpenTap opens a queue of the persistent tap name, as the runner does for QEMU: TUNSETIFF on
// an existing tap needs no capability from the tap's owner. The flags must be the ones the
// agent created it with.
func OpenTap(name string) (*os.File, error) {
	fd, err := unix.Open(tunDevice, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w (the devices.virtpod.io/control device brings it into the runner container)", tunDevice, err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tap %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("open tap %s: %w (the tap belongs to another user: the node agent makes it the runner's, uid %d)", name, err, os.Getuid())
		}
		return nil, fmt.Errorf("open tap %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), tunDevice), nil
}

// ensureTunDevice creates /dev/net/tun when the container runtime did not (it needs CAP_MKNOD,
// which the node agent has).
func ensureTunDevice() error {
	if _, err := os.Stat(tunDevice); err == nil {
		return nil
	}
	if err := os.MkdirAll("/dev/net", 0o755); err != nil {
		return fmt.Errorf("create /dev/net: %w", err)
	}
	if err := unix.Mknod(tunDevice, unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200))); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w (the node agent needs CAP_MKNOD, or the device mapped into its container)", tunDevice, err)
	}
	return nil
}

// randomLocalMAC returns a random unicast, locally administered MAC different from avoid.
func randomLocalMAC(avoid net.HardwareAddr) (net.HardwareAddr, error) {
	for {
		m := make(net.HardwareAddr, 6)
		if _, err := rand.Read(m); err != nil {
			return nil, err
		}
		m[0] = m[0]&^0x01 | 0x02
		if m.String() != avoid.String() {
			return m, nil
		}
	}
}
