package inetsum

import "testing"

func TestChecksum(t *testing.T) {
	// RFC 1071's example words 0001 f203 f4f5 f6f7 sum to 0xddf2; the checksum is its complement.
	if got := Checksum([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}); got != ^uint16(0xddf2) {
		t.Errorf("RFC 1071 example: %#04x, want %#04x", got, ^uint16(0xddf2))
	}
	// A real IPv4 header (the checksum field zeroed) and the checksum it carried on the wire.
	h := []byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if got := Checksum(h); got != 0xb861 {
		t.Errorf("IPv4 header: %#04x, want 0xb861", got)
	}
	// Odd length: the last byte counts as the high half of a word.
	if got := Checksum([]byte{0x01}); got != ^uint16(0x0100) {
		t.Errorf("odd length: %#04x", got)
	}
}
