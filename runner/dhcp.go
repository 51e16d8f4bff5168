package runner

import (
	"context"
	"fmt"
	"regexp"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/pkg/dhcpserver"
	"github.com/virtpod/virtpod/pkg/guestnet"
)

// hostLabel is what DHCP's host-name option may carry: one DNS label.
var hostLabel = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$`)

// guestLease is the one DHCP answer the guest gets: its address and prefix and gateway (the
// pod's in pod mode, 10.0.2.2/24 and 10.0.2.1 in masquerade mode), the pod's DNS, search domains
// and MTU, and the VM's name as its hostname. The gateway is also the server identifier: a
// renewal the guest sends there is read on the tap like any other.
func guestLease(pl *guestnet.Plumbing, name string) dhcpserver.Lease {
	g := pl.Guest
	l := dhcpserver.Lease{
		MAC: pl.GuestMAC, Addr: g.Addr, Gateway: g.Gateway, ServerID: g.Gateway,
		DNS: g.DNS, Search: g.Search, MTU: g.MTU,
	}
	if hostLabel.MatchString(name) {
		l.Hostname = name
	}
	return l
}

// startDHCP serves the guest's DHCP on its tap until ctx ends, answering from the bridge's MAC,
// and logs every answer. It returns once the lease is known to be servable.
func startDHCP(ctx context.Context, pl *guestnet.Plumbing, name string, log *zap.Logger) error {
	lease := guestLease(pl, name)
	if err := lease.Validate(); err != nil {
		return err
	}
	// The server reads the tap with a packet socket, which takes CAP_NET_RAW: find out now, not
	// from a guest that never gets an address.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err != nil {
		return fmt.Errorf("dhcp: packet socket: %w (the runner needs CAP_NET_RAW to serve the guest's DHCP)", err)
	}
	unix.Close(fd)
	br, err := netlink.LinkByName(pl.Bridge)
	if err != nil {
		return fmt.Errorf("dhcp: bridge %s: %w", pl.Bridge, err)
	}
	answered := func(req, resp *dhcpv4.DHCPv4) {
		log.Info("dhcp answer", zap.Stringer("type", resp.MessageType()), zap.Stringer("request", req.MessageType()),
			zap.Stringer("mac", resp.ClientHWAddr), zap.Stringer("ip", resp.YourIPAddr), zap.String("prefix", lease.Addr.String()),
			zap.Stringer("gateway", lease.Gateway), zap.String("hostname", lease.Hostname))
	}
	go func() {
		if err := dhcpserver.Serve(ctx, pl.Tap, br.Attrs().HardwareAddr, lease, answered); err != nil {
			log.Error("dhcp server stopped", zap.Error(err))
		}
	}()
	log.Info("dhcp server", zap.String("interface", pl.Tap), zap.Stringer("guestMAC", lease.MAC), zap.String("address", lease.Addr.String()),
		zap.Stringer("gateway", lease.Gateway), zap.Int("dns", len(lease.DNS)), zap.Strings("search", lease.Search), zap.Int("mtu", lease.MTU))
	return nil
}
