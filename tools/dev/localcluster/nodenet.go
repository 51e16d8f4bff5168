package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// masqChain masquerades what a node's pods send outside the cluster's pod network. The CNI
// bridge plugin's own ipMasq would also masquerade pod-to-pod traffic between nodes (it spares
// only the node's own range); pods see each other's addresses, as Kubernetes wants. Its CNI-
// prefix puts it under down's chain cleanup.
const masqChain = "CNI-VIRTPOD-MASQ"

// podMasquerade makes masqChain in the calling thread's network namespace and jumps to it for
// traffic from podCIDR, after kube-proxy's own (prepended) KUBE-POSTROUTING.
func podMasquerade(podCIDR string) error {
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return err
	}
	if err := ipt.ClearChain("nat", masqChain); err != nil { // made or emptied
		return err
	}
	for _, rule := range [][]string{
		{"-d", clusterCIDR, "-j", "RETURN"},
		{"-d", "224.0.0.0/4", "-j", "RETURN"},
		{"-j", "MASQUERADE"},
	} {
		if err := ipt.Append("nat", masqChain, rule...); err != nil {
			return err
		}
	}
	return ipt.AppendUnique("nat", "POSTROUTING", "-s", podCIDR, "-j", masqChain)
}

// inNetns runs fn on a thread in the network namespace ns; commands it starts (iptables) run
// there too.
func inNetns(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread stays locked, so the runtime ends it rather than reuse it elsewhere.
		return errors.Join(ferr, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// netnsPath is where a named network namespace is pinned (as `ip netns` does it).
func netnsPath(name string) string { return "/run/netns/" + name }

// sharedNetnsDir makes /run/netns a mount of its own with shared propagation, as `ip netns add`
// does on its first use, before anything is pinned there: ip's first use would otherwise
// bind-mount the directory over itself with what is pinned in it, and the copy underneath could
// never be removed (unlinkat: device or resource busy).
func sharedNetnsDir() error {
	const dir = "/run/netns"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if !errors.Is(err, unix.EINVAL) {
		return err // nil: already a mount point
	}
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	return unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
}

// openOrMakeNetns returns the named network namespace, made (and pinned) when missing.
func openOrMakeNetns(name string) (netns.NsHandle, error) {
	if ns, err := netns.GetFromName(name); err == nil {
		return ns, nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return netns.None(), err
	}
	defer orig.Close()
	if err := sharedNetnsDir(); err != nil {
		return netns.None(), fmt.Errorf("making /run/netns a shared mount: %w", err)
	}
	ns, err := netns.NewNamed(name) // leaves this thread in it
	if rerr := netns.Set(orig); rerr != nil {
		panic(fmt.Sprintf("cannot return to the host's network namespace: %v", rerr))
	}
	return ns, err
}

// nodeNetwork joins a second node's network namespace to the host: a veth whose host end is a
// port of the first node's bridge (vpnode0, 10.217.0.1), the node's address on the other end
// (eth0), a default route to the host, and host routes to the node and its pods' range. Pods of
// either node then reach the other's and the API server by routing alone.
func (c *cluster) nodeNetwork(nsName, veth string) error {
	bridge, err := netlink.LinkByName(nodeBridge)
	if err != nil {
		return fmt.Errorf("the first node's bridge %s: %w (is the cluster up?)", nodeBridge, err)
	}
	ns, err := openOrMakeNetns(nsName)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", nsName, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	if _, err := netlink.LinkByName(veth); err != nil {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: veth, MasterIndex: bridge.Attrs().Index},
			PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("veth %s: %w", veth, err)
		}
	}
	host, err := netlink.LinkByName(veth)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return err
	}
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(lo); err != nil {
		return err
	}
	eth, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	addr, err := netlink.ParseAddr(c.nodeIP + "/24")
	if err != nil {
		return err
	}
	if err := h.AddrReplace(eth, addr); err != nil {
		return err
	}
	if err := h.LinkSetUp(eth); err != nil {
		return err
	}
	gw := net.ParseIP(c.primary.nodeIP)
	if err := h.RouteReplace(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: gw}); err != nil {
		return fmt.Errorf("default route in %s: %w", nsName, err)
	}
	addr6, err := netlink.ParseAddr(c.nodeIP6 + "/64")
	if err != nil {
		return err
	}
	addr6.Flags = unix.IFA_F_NODAD
	if err := h.AddrReplace(eth, addr6); err != nil {
		return err
	}
	_, any6, _ := net.ParseCIDR("::/0")
	if err := h.RouteReplace(&netlink.Route{LinkIndex: eth.Attrs().Index, Dst: any6, Gw: net.ParseIP(c.primary.nodeIP6)}); err != nil {
		return fmt.Errorf("IPv6 default route in %s: %w", nsName, err)
	}
	for _, r := range c.hostRoutes(bridge.Attrs().Index) {
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("host route to %s: %w", r.Dst, err)
		}
	}
	return inNetns(ns, func() error {
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644); err != nil {
			return err
		}
		return podMasquerade(c.podCIDR)
	})
}

// hostRoutes are the host's routes to a second node: its address on the bridge, its pods
// through it.
func (c *cluster) hostRoutes(bridgeIndex int) []*netlink.Route {
	_, node, _ := net.ParseCIDR(c.nodeIP + "/32")
	_, pods, _ := net.ParseCIDR(c.podCIDR)
	_, pods6, _ := net.ParseCIDR(c.podCIDR6)
	return []*netlink.Route{
		{LinkIndex: bridgeIndex, Dst: node, Scope: netlink.SCOPE_LINK},
		{LinkIndex: bridgeIndex, Dst: pods, Gw: net.ParseIP(c.nodeIP)},
		{LinkIndex: bridgeIndex, Dst: pods6, Gw: net.ParseIP(c.nodeIP6)},
	}
}

// routeFamily is the netlink family of a route's destination.
func routeFamily(r *netlink.Route) int {
	if r.Dst.IP.To4() == nil {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

// hostRoutesLeft lists the host's routes to a second node's address or pods, by destination.
func (c *cluster) hostRoutesLeft() []string {
	var left []string
	for _, r := range c.hostRoutes(0) {
		got, err := netlink.RouteListFiltered(routeFamily(r), &netlink.Route{Dst: r.Dst}, netlink.RT_FILTER_DST)
		if err == nil && len(got) > 0 {
			left = append(left, "route left: "+r.Dst.String())
		}
	}
	return left
}

// removeNodeNetwork deletes a second node's host routes, veth (both ends) and network
// namespace, whatever of them exists.
func (c *cluster) removeNodeNetwork(nsName, veth string) []error {
	var errs []error
	for _, r := range c.hostRoutes(0) {
		got, _ := netlink.RouteListFiltered(routeFamily(r), &netlink.Route{Dst: r.Dst}, netlink.RT_FILTER_DST)
		for i := range got {
			if err := netlink.RouteDel(&got[i]); err != nil {
				errs = append(errs, fmt.Errorf("route %s: %w", r.Dst, err))
			}
		}
	}
	if l, err := netlink.LinkByName(veth); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("veth %s: %w", veth, err))
		}
	}
	if _, err := os.Stat(netnsPath(nsName)); err == nil {
		unmountUnder(netnsPath(nsName))
		if err := os.Remove(netnsPath(nsName)); err != nil {
			errs = append(errs, fmt.Errorf("network namespace %s: %w", nsName, err))
		}
	}
	return errs
}
