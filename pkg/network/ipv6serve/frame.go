package ipv6serve

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"

	"github.com/virtpod/virtpod/pkg/network/inetsum"
)

// Protocol numbers and ports the server reads and writes.
const (
	etherTypeIPv6 = 0x86dd
	ethHeaderLen  = 14
	ipv6HeaderLen = 40
	protoICMPv6   = 58
	protoUDP      = 17
	portClient    = 546
	portServer    = 547
)

// packet is an IPv6 packet in an Ethernet frame, as far as the server reads one.
type packet struct {
	srcMAC, dstMAC net.HardwareAddr
	src, dst       netip.Addr
	next           uint8  // the IPv6 next header: ICMPv6 or UDP (no extension headers)
	payload        []byte // what follows the IPv6 header, up to its payload length
}

var errNotOurs = errors.New("not an IPv6 packet the server answers")

func parseFrame(f []byte) (packet, error) {
	if len(f) < ethHeaderLen+ipv6HeaderLen || binary.BigEndian.Uint16(f[12:]) != etherTypeIPv6 {
		return packet{}, errNotOurs
	}
	ip := f[ethHeaderLen:]
	if ip[0]>>4 != 6 {
		return packet{}, errNotOurs
	}
	n := int(binary.BigEndian.Uint16(ip[4:]))
	if ipv6HeaderLen+n > len(ip) {
		return packet{}, errNotOurs
	}
	return packet{
		dstMAC: net.HardwareAddr(f[0:6]), srcMAC: net.HardwareAddr(f[6:12]),
		src: netip.AddrFrom16([16]byte(ip[8:24])), dst: netip.AddrFrom16([16]byte(ip[24:40])),
		next: ip[6], payload: ip[ipv6HeaderLen : ipv6HeaderLen+n],
	}, nil
}

// frame builds an Ethernet frame carrying an IPv6 packet. hopLimit 255 marks neighbour
// discovery, which a receiver drops unless it came from the link itself (RFC 4861).
func frame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, next, hopLimit uint8, payload []byte) []byte {
	f := make([]byte, ethHeaderLen+ipv6HeaderLen+len(payload))
	copy(f[0:6], dstMAC)
	copy(f[6:12], srcMAC)
	binary.BigEndian.PutUint16(f[12:], etherTypeIPv6)
	ip := f[ethHeaderLen:]
	ip[0] = 6 << 4
	binary.BigEndian.PutUint16(ip[4:], uint16(len(payload)))
	ip[6], ip[7] = next, hopLimit
	s, d := src.As16(), dst.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	copy(ip[ipv6HeaderLen:], payload)
	return f
}

// udp wraps b in a UDP header from port sport to dport with its checksum, which IPv6 requires.
func udp(src, dst netip.Addr, sport, dport uint16, b []byte) []byte {
	u := make([]byte, 8+len(b))
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	copy(u[8:], b)
	sum := inetsum.Checksum(append(pseudoHeader(src, dst, len(u), protoUDP), u...))
	if sum == 0 {
		sum = 0xffff // zero means "no checksum", which IPv6 forbids
	}
	binary.BigEndian.PutUint16(u[6:], sum)
	return u
}

// pseudoHeader is what an upper-layer checksum covers beside the payload (RFC 8200, 8.1).
func pseudoHeader(src, dst netip.Addr, length int, next uint8) []byte {
	p := make([]byte, 40)
	s, d := src.As16(), dst.As16()
	copy(p[0:16], s[:])
	copy(p[16:32], d[:])
	binary.BigEndian.PutUint32(p[32:], uint32(length))
	p[39] = next
	return p
}

// multicastMAC is the Ethernet address an IPv6 multicast group maps to (RFC 2464, 7).
func multicastMAC(group netip.Addr) net.HardwareAddr {
	a := group.As16()
	return net.HardwareAddr{0x33, 0x33, a[12], a[13], a[14], a[15]}
}
