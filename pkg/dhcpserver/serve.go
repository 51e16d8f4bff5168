package dhcpserver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/pkg/inetsum"
)

const (
	etherTypeIPv4 = 0x0800
	protoUDP      = 17
	portServer    = 67
	portClient    = 68
)

// Serve answers the guest's DHCP on ifname (its tap) until ctx ends. It reads frames with a
// packet socket for every protocol: on a bridge port only such a tap sees frames before the
// bridge takes them, so the server needs no address of its own on the interface and nothing
// reaches or leaves through the pod's eth0. serverMAC is the source of its answers. answered,
// when not nil, is told of every answer sent (the runner logs them).
func Serve(ctx context.Context, ifname string, serverMAC net.HardwareAddr, l Lease, answered func(req, resp *dhcpv4.DHCPv4)) error {
	if err := l.Validate(); err != nil {
		return err
	}
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return fmt.Errorf("dhcp: %w", err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return fmt.Errorf("dhcp: packet socket: %w (the runner needs CAP_NET_RAW or CAP_NET_ADMIN)", err)
	}
	defer unix.Close(fd)
	addr := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: iface.Index}
	if err := unix.Bind(fd, addr); err != nil {
		return fmt.Errorf("dhcp: bind to %s: %w", ifname, err)
	}
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond)) // how often ctx is looked at
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("dhcp: %w", err)
	}
	buf := make([]byte, 65536)
	for ctx.Err() == nil {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("dhcp: read %s: %w", ifname, err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // our own answers, and the guest's other inbound traffic
		}
		req, ok := parse(buf[:n])
		if !ok {
			continue
		}
		resp, ok := l.Reply(req)
		if !ok {
			continue
		}
		frame := encode(resp, serverMAC, l.ServerID)
		if err := unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: iface.Index, Halen: 6, Addr: [8]byte(append(append([]byte{}, resp.ClientHWAddr...), 0, 0))}); err != nil {
			return fmt.Errorf("dhcp: answer on %s: %w", ifname, err)
		}
		if answered != nil {
			answered(req, resp)
		}
	}
	return nil
}

// parse finds a DHCP request in an Ethernet frame: IPv4, UDP to port 67.
func parse(f []byte) (*dhcpv4.DHCPv4, bool) {
	if len(f) < 14+20+8 || binary.BigEndian.Uint16(f[12:]) != etherTypeIPv4 {
		return nil, false
	}
	ip := f[14:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < 20 || len(ip) < ihl+8 || ip[9] != protoUDP {
		return nil, false
	}
	udp := ip[ihl:]
	if binary.BigEndian.Uint16(udp[2:]) != portServer {
		return nil, false
	}
	end := int(binary.BigEndian.Uint16(udp[4:]))
	if end < 8 || end > len(udp) {
		return nil, false
	}
	m, err := dhcpv4.FromBytes(udp[8:end])
	return m, err == nil
}

// encode wraps an answer in UDP, IPv4 and Ethernet, addressed as RFC 2131 4.1 says: broadcast
// when the client asked for it or the answer is a NAK, else to the offered address, always to
// the client's MAC at the link layer.
func encode(m *dhcpv4.DHCPv4, src net.HardwareAddr, from net.IP) []byte {
	payload := m.ToBytes()
	dst := m.YourIPAddr.To4()
	if m.IsBroadcast() || m.MessageType() == dhcpv4.MessageTypeNak || dst == nil || dst.IsUnspecified() {
		dst = net.IPv4bcast.To4()
	}
	udp := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], portServer)
	binary.BigEndian.PutUint16(udp[2:], portClient)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	udp = append(udp, payload...) // UDP checksum 0: none, allowed over IPv4
	ip := make([]byte, 20, 20+len(udp))
	ip[0], ip[8], ip[9] = 0x45, 64, protoUDP
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
	copy(ip[12:16], from.To4())
	copy(ip[16:20], dst)
	binary.BigEndian.PutUint16(ip[10:], inetsum.Checksum(ip))
	frame := make([]byte, 0, 14+len(ip)+len(udp))
	frame = append(frame, m.ClientHWAddr...)
	frame = append(frame, src...)
	frame = binary.BigEndian.AppendUint16(frame, etherTypeIPv4)
	frame = append(frame, ip...)
	return append(frame, udp...)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
