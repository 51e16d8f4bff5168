package dhcpserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/sys/unix"
)

const (
	portServer = 67
	portClient = 68
)

// Serve answers the guest's DHCP on ifname until ctx ends, on an ordinary UDP socket: bound to
// port 67 of that interface alone (SO_BINDTODEVICE, which needs no capability), so it takes no
// CAP_NET_RAW and hears nothing from the pod's eth0. ifname is the interface the guest's
// broadcasts reach the pod's namespace on: the bridge. Every answer goes to the lease's address
// at port 68 by the namespace's own routing; the node agent pinned that address to the guest's
// MAC with a permanent neighbour entry (pkg/network/guestnet), so no ARP is asked of a guest that has no
// address yet, and nothing is broadcast onto the pod network. The lease's ServerID must be the
// namespace's address towards the guest, where a renewal comes back. answered, when not nil, is
// told of every answer sent (the runner logs them).
func Serve(ctx context.Context, ifname string, l Lease, answered func(req, resp *dhcpv4.DHCPv4)) error {
	if err := l.Validate(); err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("dhcp: socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fmt.Errorf("dhcp: %w", err)
	}
	if err := unix.BindToDevice(fd, ifname); err != nil {
		return fmt.Errorf("dhcp: bind to %s: %w", ifname, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: portServer}); err != nil {
		return fmt.Errorf("dhcp: bind port %d on %s: %w (the pod sets net.ipv4.ip_unprivileged_port_start=0 so that the runner may)", portServer, ifname, err)
	}
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond)) // how often ctx is looked at
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("dhcp: %w", err)
	}
	to := &unix.SockaddrInet4{Port: portClient, Addr: [4]byte(l.Addr.IP.To4())}
	buf := make([]byte, 65536)
	for ctx.Err() == nil {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("dhcp: read %s: %w", ifname, err)
		}
		req, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			continue
		}
		resp, ok := l.Reply(req)
		if !ok {
			continue
		}
		if err := unix.Sendto(fd, resp.ToBytes(), 0, to); err != nil {
			return fmt.Errorf("dhcp: answer on %s: %w", ifname, err)
		}
		if answered != nil {
			answered(req, resp)
		}
	}
	return nil
}
