package guestnet

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Default device names, short enough for IFNAMSIZ and recognisable in `ip link` output.
const (
	DefaultBridge = "vp-br0"
	DefaultTap    = "vp-tap0"
	tunDevice     = "/dev/net/tun"
)

// Plumbing is the result of Plumb.
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
	// TapFile is the open tap queue to hand to the hypervisor; the tap disappears when it and
	// every copy of it are closed. nil when Plumb was asked for a persistent tap instead.
	TapFile *os.File
}

// Plumb rewires the pod interface so the guest owns the pod's IP:
//
//	pod eth0 (new local MAC, no IP) ── bridge ── tap ── guest eth0 (pod MAC, pod IP)
//
// The guest gets the original MAC so the neighbour entries the pod network already holds for
// the pod IP stay right, and the pod interface gets a new locally administered MAC so the two
// never collide on the bridge.
//
// With keepOpen the tap lives as long as the returned TapFile (for QEMU, which takes the open
// file); without it the tap persists for a hypervisor that opens it by name.
func Plumb(p PodInterface, bridgeName, tapName string, keepOpen bool) (*Plumbing, error) {
	if err := ensureTunDevice(); err != nil {
		return nil, err
	}
	link, err := netlink.LinkByIndex(p.Index)
	if err != nil {
		return nil, fmt.Errorf("pod interface %s: %w", p.Name, err)
	}
	podMAC, err := randomLocalMAC(p.MAC)
	if err != nil {
		return nil, err
	}
	bridgeMAC, err := randomLocalMAC(p.MAC)
	if err != nil {
		return nil, err
	}
	pl := &Plumbing{Pod: p, Guest: p, GuestMAC: p.MAC, PodMAC: podMAC, BridgeMAC: bridgeMAC, Bridge: bridgeName, Tap: tapName}

	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: bridgeName, MTU: p.MTU, HardwareAddr: bridgeMAC}}
	if err := netlink.LinkAdd(br); err != nil {
		return nil, fmt.Errorf("create bridge %s: %w (the runner needs CAP_NET_ADMIN)", bridgeName, err)
	}
	// The bridge and tap carry the guest's traffic only: no IPv6 link-local address of their
	// own, so the pod namespace never speaks on the pod network with their MACs.
	_ = netlink.LinkSetIP6AddrGenMode(br, 1) // IN6_ADDR_GEN_MODE_NONE

	addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", p.Name, err)
	}
	for _, a := range addrs {
		if err := netlink.AddrDel(link, &a); err != nil {
			return nil, fmt.Errorf("move %s off %s: %w", a.IPNet, p.Name, err)
		}
	}
	if err := netlink.LinkSetDown(link); err != nil {
		return nil, fmt.Errorf("set %s down: %w", p.Name, err)
	}
	if err := netlink.LinkSetHardwareAddr(link, podMAC); err != nil {
		return nil, fmt.Errorf("give %s a new MAC: %w", p.Name, err)
	}
	if err := netlink.LinkSetMaster(link, br); err != nil {
		return nil, fmt.Errorf("add %s to bridge %s: %w", p.Name, bridgeName, err)
	}

	tapLink, err := pl.addTap(p.MTU, keepOpen, br)
	if err != nil {
		return nil, err
	}
	for _, l := range []netlink.Link{tapLink, link, br} {
		if err := netlink.LinkSetUp(l); err != nil {
			return nil, errors.Join(fmt.Errorf("set %s up: %w", l.Attrs().Name, err), pl.close())
		}
	}
	return pl, nil
}

// addTap creates pl.Tap in the bridge br; with keepOpen, its queue is pl.TapFile.
func (pl *Plumbing) addTap(mtu int, keepOpen bool, br netlink.Link) (netlink.Link, error) {
	tap := &netlink.Tuntap{
		LinkAttrs: netlink.LinkAttrs{Name: pl.Tap, MTU: mtu},
		Mode:      netlink.TUNTAP_MODE_TAP,
		// VNET_HDR lets QEMU's virtio-net pass checksum and segmentation offloads through.
		Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR,
	}
	if keepOpen {
		tap.Queues, tap.NonPersist = 1, true
	}
	if err := netlink.LinkAdd(tap); err != nil {
		return nil, fmt.Errorf("create tap %s: %w", pl.Tap, err)
	}
	if keepOpen {
		pl.TapFile = tap.Fds[0]
	}
	tapLink, err := netlink.LinkByName(pl.Tap)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("tap %s: %w", pl.Tap, err), pl.close())
	}
	_ = netlink.LinkSetIP6AddrGenMode(tapLink, 1)
	// Creating a tap takes no MTU: set it, or it stays 1500 on an overlay's smaller one.
	if mtu > 0 && tapLink.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(tapLink, mtu); err != nil {
			return nil, errors.Join(fmt.Errorf("MTU %d on tap %s: %w", mtu, pl.Tap, err), pl.close())
		}
	}
	if err := netlink.LinkSetMaster(tapLink, br); err != nil {
		return nil, errors.Join(fmt.Errorf("add tap %s to bridge: %w", pl.Tap, err), pl.close())
	}
	return tapLink, nil
}

func (pl *Plumbing) close() error {
	if pl.TapFile == nil {
		return nil
	}
	return pl.TapFile.Close()
}

// ensureTunDevice creates /dev/net/tun when the container runtime did not (it needs CAP_MKNOD).
func ensureTunDevice() error {
	if _, err := os.Stat(tunDevice); err == nil {
		return nil
	}
	if err := os.MkdirAll("/dev/net", 0o755); err != nil {
		return fmt.Errorf("create /dev/net: %w", err)
	}
	if err := unix.Mknod(tunDevice, unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200))); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w (the runner needs CAP_MKNOD, or the device mapped into the container)", tunDevice, err)
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
