// Package inetsum computes the Internet checksum (RFC 1071) of an IPv4 header, for the frames
// the runner writes itself (DHCP answers) and the tests that forge them.
package inetsum

// Checksum is the ones' complement of the ones' complement sum of b's 16-bit words; an odd last
// byte is padded with zero.
func Checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}
