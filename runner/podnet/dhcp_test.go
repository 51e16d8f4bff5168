package podnet

import (
	"net"
	"testing"

	"github.com/virtpod/virtpod/pkg/network/guestnet"
)

// TestGuestLease: the DHCP answer is the pod's identity, with the VM name as host name only when
// it is one DNS label, from the runner's own address towards the guest (where renewals come).
func TestGuestLease(t *testing.T) {
	ip, prefix, _ := net.ParseCIDR("10.213.9.2/24")
	prefix.IP = ip
	pl := &guestnet.Plumbing{
		GuestMAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0xd5, 0x09, 0x02},
		Guest: guestnet.PodInterface{Addr: prefix, Gateway: net.ParseIP("10.213.9.1"), MTU: 1450,
			DNS: []net.IP{net.ParseIP("10.96.0.10")}, Search: []string{"default.svc.cluster.local"}},
	}
	l := guestLease(pl, guestnet.RelayIP, "vm-1")
	if l.MAC.String() != pl.GuestMAC.String() || l.Addr.String() != "10.213.9.2/24" || !l.Gateway.Equal(pl.Guest.Gateway) ||
		!l.ServerID.Equal(guestnet.RelayIP) || l.MTU != 1450 || len(l.DNS) != 1 || len(l.Search) != 1 || l.Hostname != "vm-1" {
		t.Fatalf("lease %+v", l)
	}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a.b", "-x", "x_y", string(make([]byte, 64))} {
		if h := guestLease(pl, guestnet.RelayIP, name).Hostname; h != "" {
			t.Errorf("VM name %q became host name %q", name, h)
		}
	}
	pl.Guest.Gateway = nil // a pod without a default route: nothing to serve
	if err := guestLease(pl, guestnet.RelayIP, "vm-1").Validate(); err == nil {
		t.Error("a lease without a gateway validated")
	}

	// Masquerade: the fixed address and gateway, the pod's DNS and MTU, the MAC from the name.
	pod := guestnet.PodInterface{Addr: prefix, Gateway: net.ParseIP("10.213.9.1"), MTU: 1450, DNS: []net.IP{net.ParseIP("10.96.0.10")}}
	gm, _ := guestnet.MasqueradeMACs("vm-1")
	m := guestLease(&guestnet.Plumbing{Pod: pod, Guest: guestnet.MasqueradeGuest(pod, gm), GuestMAC: gm}, guestnet.MasqueradeGatewayIP, "vm-1")
	if m.Addr.String() != "10.0.2.2/24" || !m.Gateway.Equal(guestnet.MasqueradeGatewayIP) || !m.ServerID.Equal(guestnet.MasqueradeGatewayIP) ||
		m.MAC.String() != gm.String() || m.MTU != 1450 || len(m.DNS) != 1 || m.Validate() != nil {
		t.Fatalf("masquerade lease %+v", m)
	}
}
