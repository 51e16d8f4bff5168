package nethandoff

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtpod/virtpod/pkg/guestnet"
)

// handoff runs one handoff: a runner's server on a socket, an agent that answers with r (and
// with link, when not nil, as the plumbing's IPv6 link). It returns what the runner's Wait got.
func handoff(t *testing.T, r Result, link *os.File) (*guestnet.Plumbing, error) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "netns.sock")
	ns, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ListenWith(sock, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	go func() {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Net: "unix", Name: sock})
		if err != nil {
			return
		}
		defer c.Close()
		h, got, err := Receive(c)
		if err != nil || h.Plumbed {
			return
		}
		got.Close()
		if r.Plumbing != nil {
			r.Plumbing.Link6 = link
		}
		_ = Reply(c, r)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Wait(ctx)
}

func plumbing(ipv6 bool) *guestnet.Plumbing {
	pl := &guestnet.Plumbing{Bridge: "vp-br0", Tap: "vp-tap0", GuestMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1},
		Guest: guestnet.PodInterface{Addr: &net.IPNet{IP: net.IPv4(10, 0, 0, 2).To4(), Mask: net.CIDRMask(24, 32)}}}
	if ipv6 {
		pl.Guest.Addr6 = &net.IPNet{IP: net.ParseIP("fd00::2"), Mask: net.CIDRMask(64, 128)}
	}
	return pl
}

// TestIPv6LinkHandedOver: a dual-stack guest's plumbing comes with the descriptor the agent sent
// beside it, and it is the same open file: what the runner writes into it, the agent's side reads.
func TestIPv6LinkHandedOver(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pl, err := handoff(t, Result{Plumbing: plumbing(true)}, w)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if pl.Link6 == nil || pl.Guest.Addr6.String() != "fd00::2/64" {
		t.Fatalf("plumbing %+v: want the IPv6 link with it", pl)
	}
	if _, err := pl.Link6.Write([]byte("frame")); err != nil {
		t.Fatal(err)
	}
	pl.Link6.Close()
	buf := make([]byte, 16)
	if n, _ := r.Read(buf); string(buf[:n]) != "frame" {
		t.Errorf("read %q through the handed-over descriptor, want %q", buf[:n], "frame")
	}
}

// TestIPv6LinkMustMatchTheGuest: a link without an IPv6 guest, or an IPv6 guest without a link,
// is the agent's error, which the runner reports.
func TestIPv6LinkMustMatchTheGuest(t *testing.T) {
	_, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for name, tc := range map[string]struct {
		ipv6 bool
		link *os.File
	}{"IPv6 guest, no link": {true, nil}, "link, IPv4-only guest": {false, w}} {
		_, err := handoff(t, Result{Plumbing: plumbing(tc.ipv6)}, tc.link)
		if err == nil || !strings.Contains(err.Error(), "want the IPv6 link exactly when the guest has one") {
			t.Errorf("%s: Wait = %v, want the mismatch reported", name, err)
		}
	}
	if pl, err := handoff(t, Result{Plumbing: plumbing(false)}, nil); err != nil || pl.Link6 != nil {
		t.Errorf("IPv4-only: %+v, %v", pl, err)
	}
}
