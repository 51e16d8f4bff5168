package guestnet

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func TestKernelIPArg(t *testing.T) {
	p := PodInterface{
		Addr:    &net.IPNet{IP: net.IPv4(10, 1, 2, 3).To4(), Mask: net.CIDRMask(24, 32)},
		Gateway: net.IPv4(10, 1, 2, 1),
		DNS:     []net.IP{net.IPv4(10, 96, 0, 10), net.IPv4(10, 96, 0, 11), net.IPv4(10, 96, 0, 12)},
	}
	if got, want := p.KernelIPArg("web-1"), "ip=10.1.2.3::10.1.2.1:255.255.255.0:web-1:eth0:off:10.96.0.10:10.96.0.11"; got != want {
		t.Errorf("KernelIPArg = %q, want %q", got, want)
	}
	// A name that would add fields to ip= (':') or arguments (' ') is dropped, not passed on.
	for _, bad := range []string{"a:b", "a b", "-a", strings.Repeat("x", 64)} {
		if got := p.KernelIPArg(bad); !strings.Contains(got, ":255.255.255.0::eth0:off") {
			t.Errorf("KernelIPArg(%q) = %q: invalid hostname not dropped", bad, got)
		}
	}
	// A /32 pod address with no gateway still yields a well-formed argument.
	p32 := PodInterface{Addr: &net.IPNet{IP: net.IPv4(10, 1, 2, 3).To4(), Mask: net.CIDRMask(32, 32)}}
	if got, want := p32.KernelIPArg("x"), "ip=10.1.2.3:::255.255.255.255:x:eth0:off"; got != want {
		t.Errorf("KernelIPArg = %q, want %q", got, want)
	}
}

func TestReadResolvConf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(path, []byte("# comment\nnameserver 10.96.0.10\nnameserver fd00::10\nnameserver fe80::1%eth0\nsearch ns.svc.cluster.local svc.cluster.local\noptions ndots:5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dns, search, err := ReadResolvConf(path)
	if err != nil || len(dns) != 2 || !dns[0].Equal(net.IPv4(10, 96, 0, 10)) || !dns[1].Equal(net.ParseIP("fd00::10")) || len(search) != 2 {
		t.Fatalf("readResolvConf = %v %v %v", dns, search, err)
	}
	// Each family's nameservers go to the guest in that family, IPv6 ones only to a dual-stack
	// guest.
	for _, dual := range []bool{false, true} {
		p := PodInterface{Addr: &net.IPNet{IP: net.IPv4(10, 1, 0, 2).To4(), Mask: net.CIDRMask(24, 32)}}
		if dual {
			p.Addr6 = &net.IPNet{IP: net.ParseIP("fd00:1::2"), Mask: net.CIDRMask(64, 128)}
		}
		pl := &Plumbing{Pod: p, Guest: p}
		pl.WithResolver(dns, search)
		if len(pl.Guest.DNS) != 1 || pl.Guest.DNS[0].To4() == nil || len(pl.Guest.DNS6) != map[bool]int{false: 0, true: 1}[dual] {
			t.Errorf("dual-stack %t: the guest's nameservers are %v and %v", dual, pl.Guest.DNS, pl.Guest.DNS6)
		}
	}
}

// TestPlumbInNetns runs Discover and Plumb in a network namespace standing in for a pod's and
// checks the result with netlink: the address is off eth0, eth0 has a new local MAC and sits
// in the bridge with the tap, and the guest is to get eth0's original MAC.
func TestPlumbInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (CI=true: failing instead of skipping)")
		}
		t.Skip("needs root to create a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2")
	}
	name := fmt.Sprintf("vpt-gn-%d", os.Getpid())
	hostIf := fmt.Sprintf("vptgn%d", os.Getpid()%100000)
	mustRun := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
		}
	}
	mustRun("netns", "add", name)
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", name).Run()
		_ = exec.Command("ip", "link", "del", hostIf).Run()
	})
	mustRun("link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", name)
	mustRun("link", "set", hostIf, "up")
	mustRun("-n", name, "addr", "add", "10.213.200.2/24", "dev", "eth0")
	mustRun("-n", name, "link", "set", "eth0", "up")
	mustRun("-n", name, "route", "add", "default", "via", "10.213.200.1")
	// Dual-stack, with a global IPv6 gateway as the bridge CNI plugin sets it.
	mustRun("addr", "add", "fd00:213:200::1/64", "dev", hostIf, "nodad")
	mustRun("-n", name, "addr", "add", "fd00:213:200::2/64", "dev", "eth0", "nodad")
	mustRun("-n", name, "-6", "route", "add", "default", "via", "fd00:213:200::1")
	hostMAC, err := net.InterfaceByName(hostIf)
	if err != nil {
		t.Fatal(err)
	}
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 10.213.200.53\nnameserver fd00:213:200::53\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	type result struct {
		pod  PodInterface
		pl   *Plumbing
		pl2  *Plumbing
		err  error
		eth0 netlink.Link
		tap  netlink.Link
		br   netlink.Link
		ips  []netlink.Addr
		ips6 []netlink.Addr
		// After AddRelay (run twice: a runner restarted in its pod):
		brIPs  []netlink.Addr
		routes []netlink.Route
		neighs []netlink.Neigh
		fdb    []netlink.Neigh
	}
	done := make(chan result)
	injected, echoed, echoErr := make(chan net.HardwareAddr, 1), make(chan struct{}), make(chan error, 1)
	go func() {
		// This goroutine's thread enters the namespace and is never returned to the pool.
		runtime.LockOSThread()
		var r result
		defer func() { done <- r }()
		ns, err := netns.GetFromName(name)
		if err != nil {
			r.err = err
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			r.err = err
			return
		}
		if r.pod, r.err = Discover("eth0", resolv); r.err != nil {
			return
		}
		if r.pl, r.err = Plumb(r.pod, DefaultBridge, DefaultTap, TapOwner{UID: 107, GID: 108}); r.err != nil {
			return
		}
		// An agent that died after the move plumbs again: the pod's identity comes back from
		// the bridge, and the second result is the first.
		again, resumed, err := Resume(PodInterface{Name: "eth0", Index: r.pod.Index, MTU: r.pod.MTU}, DefaultBridge)
		if err != nil || !resumed {
			r.err = fmt.Errorf("Resume = %v, %v", resumed, err)
			return
		}
		r.pl2, r.err = Plumb(again, DefaultBridge, DefaultTap, TapOwner{UID: 107, GID: 108})
		if r.err != nil {
			return
		}
		r.eth0, _ = netlink.LinkByName("eth0")
		r.tap, _ = netlink.LinkByName(DefaultTap)
		r.br, _ = netlink.LinkByName(DefaultBridge)
		r.ips, _ = netlink.AddrList(r.eth0, netlink.FAMILY_V4)
		r.ips6, _ = netlink.AddrList(r.eth0, netlink.FAMILY_V6)
		for range 2 {
			if r.err = r.pl.AddRelay(); r.err != nil {
				return
			}
		}
		r.brIPs, _ = netlink.AddrList(r.br, netlink.FAMILY_V4)
		r.routes, _ = netlink.RouteList(nil, netlink.FAMILY_V4)
		r.neighs, _ = netlink.NeighList(r.br.Attrs().Index, netlink.FAMILY_V4)
		// A hairpin bridge on the pod network returns the guest's broadcasts: the guest's
		// MAC then arrives on eth0, which must not move its entry off the tap.
		injected <- r.pod.MAC
		<-echoed
		r.fdb, _ = netlink.NeighList(r.tap.Attrs().Index, unix.AF_BRIDGE)
	}()
	// The echo, sent from the host end of the pod's veth.
	go func() {
		mac := <-injected
		echoErr <- sendFrom(hostIf, mac)
		close(echoed)
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := <-echoErr; err != nil {
		t.Fatalf("echoing a guest frame from the pod network: %v", err)
	}
	if r.pl2.GuestMAC.String() != r.pl.GuestMAC.String() || r.pl2.Guest.Addr.String() != r.pl.Guest.Addr.String() ||
		!r.pl2.Guest.Gateway.Equal(r.pl.Guest.Gateway) || r.pl2.PodMAC.String() != r.pl.PodMAC.String() || r.pl2.BridgeMAC.String() != r.pl.BridgeMAC.String() {
		t.Errorf("plumbing again after Resume = %+v, want the first %+v", r.pl2, r.pl)
	}
	if tt, ok := r.tap.(*netlink.Tuntap); !ok || tt.Owner != 107 || tt.Group != 108 || tt.NonPersist {
		t.Errorf("tap %+v: want a persistent tap owned by 107:108, which the runner opens without a capability", r.tap)
	}

	if r.pod.Addr.String() != "10.213.200.2/24" || !r.pod.Gateway.Equal(net.IPv4(10, 213, 200, 1)) || len(r.pod.DNS) != 1 {
		t.Fatalf("Discover = %+v", r.pod)
	}
	if r.pod.Addr6.String() != "fd00:213:200::2/64" || !r.pod.Gateway6.Equal(net.ParseIP("fd00:213:200::1")) || len(r.pod.DNS6) != 1 {
		t.Fatalf("Discover (IPv6) = %+v", r.pod)
	}
	if got := r.pl.Pod.Gateway6MAC; got.String() != hostMAC.HardwareAddr.String() {
		t.Fatalf("Plumb resolved the IPv6 gateway to %q, want %s", got, hostMAC.HardwareAddr)
	}
	// The guest's router: the gateway's MAC, at the link-local address it forms (the gateway's
	// own address is global), after a resumed plumbing too.
	for _, pl := range []*Plumbing{r.pl, r.pl2} {
		if rt := pl.Router6; rt == nil || !rt.IP.Equal(EUI64LinkLocal(hostMAC.HardwareAddr)) || rt.MAC.String() != hostMAC.HardwareAddr.String() ||
			pl.Guest.Addr6.String() != "fd00:213:200::2/64" {
			t.Errorf("IPv6 router %+v and guest address %v, want %s at %s", rt, pl.Guest.Addr6, hostMAC.HardwareAddr, EUI64LinkLocal(hostMAC.HardwareAddr))
		}
	}
	if len(r.ips) != 0 || len(r.ips6) != 0 {
		t.Errorf("eth0 still has %v %v; the addresses, link-local too, must move to the guest", r.ips, r.ips6)
	}
	if r.pl.GuestMAC.String() != r.pod.MAC.String() {
		t.Errorf("guest MAC %s, want eth0's original %s", r.pl.GuestMAC, r.pod.MAC)
	}
	got := r.eth0.Attrs().HardwareAddr
	if got.String() == r.pod.MAC.String() || got[0]&0x02 == 0 || got[0]&0x01 != 0 {
		t.Errorf("eth0's new MAC %s must differ from %s and be locally administered unicast", got, r.pod.MAC)
	}
	if r.br == nil || r.tap == nil {
		t.Fatalf("bridge %v, tap %v", r.br, r.tap)
	}
	if r.eth0.Attrs().MasterIndex != r.br.Attrs().Index || r.tap.Attrs().MasterIndex != r.br.Attrs().Index {
		t.Errorf("eth0 master %d, tap master %d, bridge index %d", r.eth0.Attrs().MasterIndex, r.tap.Attrs().MasterIndex, r.br.Attrs().Index)
	}
	if r.tap.Attrs().MTU != r.pod.MTU || r.br.Attrs().MTU != r.pod.MTU {
		t.Errorf("MTU: tap %d, bridge %d, pod %d", r.tap.Attrs().MTU, r.br.Attrs().MTU, r.pod.MTU)
	}
	if r.br.Attrs().HardwareAddr.String() != r.pl.BridgeMAC.String() {
		t.Errorf("bridge MAC %s, Plumbing says %s", r.br.Attrs().HardwareAddr, r.pl.BridgeMAC)
	}

	// The relay: only RelayIP/32 on the bridge; the only routes are to the pod IP through the
	// bridge from RelayIP (and the kernel's own for RelayIP); the pod IP resolves to the guest's
	// MAC without ARP; the bridge forwards the guest's MAC to the tap only.
	if len(r.brIPs) != 1 || r.brIPs[0].IPNet.String() != RelayIP.String()+"/32" {
		t.Errorf("bridge addresses %v, want %s/32 only", r.brIPs, RelayIP)
	}
	var toGuest int
	for _, rt := range r.routes {
		if rt.Table != unix.RT_TABLE_MAIN {
			continue
		}
		if rt.Dst == nil || rt.Dst.String() != "10.213.200.2/32" || rt.LinkIndex != r.br.Attrs().Index || !rt.Src.Equal(RelayIP) {
			t.Errorf("unexpected route %+v: the namespace must route nothing but the pod IP", rt)
			continue
		}
		toGuest++
	}
	if toGuest != 1 {
		t.Errorf("%d routes to the guest, want 1: %v", toGuest, r.routes)
	}
	// The kernel's own multicast entries (NOARP, e.g. IGMP's 224.0.0.22 once the bridge joins
	// its group) come and go with timing; the runner's is the one unicast entry.
	r.neighs = slices.DeleteFunc(r.neighs, func(n netlink.Neigh) bool { return n.State == netlink.NUD_NOARP && n.IP.IsMulticast() })
	if len(r.neighs) != 1 || !r.neighs[0].IP.Equal(net.IPv4(10, 213, 200, 2)) || r.neighs[0].HardwareAddr.String() != r.pod.MAC.String() || r.neighs[0].State != netlink.NUD_PERMANENT {
		t.Errorf("bridge neighbours %+v, want the pod IP at the guest's MAC %s, permanent", r.neighs, r.pod.MAC)
	}
	static := false
	for _, n := range r.fdb {
		if n.HardwareAddr.String() == r.pod.MAC.String() {
			static = n.State == netlink.NUD_NOARP && n.MasterIndex == r.br.Attrs().Index && n.Flags&netlink.NTF_STICKY != 0
		}
	}
	if !static {
		t.Errorf("no static, sticky forwarding entry for the guest's MAC on the tap after a frame from the guest's MAC came in on eth0: %+v", r.fdb)
	}
}

// sendFrom writes one broadcast frame with source MAC src out of the host interface ifName.
func sendFrom(ifName string, src net.HardwareAddr) error {
	l, err := netlink.LinkByName(ifName)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	frame := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, src...)
	frame = append(frame, 0x88, 0xb5) // the local experimental EtherType: nobody parses it
	frame = append(frame, make([]byte, 46)...)
	if err := unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: l.Attrs().Index, Halen: 6}); err != nil {
		return err
	}
	time.Sleep(100 * time.Millisecond) // the bridge learns as the frame passes
	return nil
}
