package podnet

import (
	"context"
	"net"
	"regexp"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/network/dhcpserver"
	"github.com/virtpod/virtpod/pkg/network/guestnet"
)

// hostLabel is what DHCP's host-name option may carry: one DNS label.
var hostLabel = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$`)

// guestLease is the one DHCP answer the guest gets: its address and prefix and gateway (the
// pod's in pod mode, 10.0.2.2/24 and 10.0.2.1 in masquerade mode), the pod's DNS, search domains
// and MTU, and the VM's name as its hostname. The server identifier is server, the runner's own
// address towards the guest (the relay address in pod mode, 10.0.2.1 in masquerade mode): a
// renewal the guest sends there reaches the runner's socket on the bridge.
func guestLease(pl *guestnet.Plumbing, server net.IP, name string) dhcpserver.Lease {
	g := pl.Guest
	l := dhcpserver.Lease{
		MAC: pl.GuestMAC, Addr: g.Addr, Gateway: g.Gateway, ServerID: server,
		DNS: g.DNS, Search: g.Search, MTU: g.MTU,
	}
	if hostLabel.MatchString(name) {
		l.Hostname = name
	}
	return l
}

// startDHCP serves the guest's DHCP on the bridge until ctx ends and logs every answer. It
// returns once the lease is known to be servable.
func startDHCP(ctx context.Context, pl *guestnet.Plumbing, server net.IP, name string, log *zap.Logger) error {
	lease := guestLease(pl, server, name)
	if err := lease.Validate(); err != nil {
		return err
	}
	answered := func(req, resp *dhcpv4.DHCPv4) {
		log.Info("dhcp answer", zap.Stringer("type", resp.MessageType()), zap.Stringer("request", req.MessageType()),
			zap.Stringer("mac", resp.ClientHWAddr), zap.Stringer("ip", resp.YourIPAddr), zap.String("prefix", lease.Addr.String()),
			zap.Stringer("gateway", lease.Gateway), zap.String("hostname", lease.Hostname))
	}
	go func() {
		if err := dhcpserver.Serve(ctx, pl.Bridge, lease, answered); err != nil {
			log.Error("dhcp server stopped", zap.Error(err))
		}
	}()
	log.Info("dhcp server", zap.String("interface", pl.Bridge), zap.Stringer("guestMAC", lease.MAC), zap.String("address", lease.Addr.String()),
		zap.Stringer("gateway", lease.Gateway), zap.Stringer("server", server), zap.Int("dns", len(lease.DNS)), zap.Strings("search", lease.Search), zap.Int("mtu", lease.MTU))
	return nil
}
