// Package loopback finds free addresses on 127.0.0.1 for servers a test starts.
package loopback

import (
	"net"
	"testing"
)

// FreeAddr is a 127.0.0.1 address with a port nothing listens on right now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
