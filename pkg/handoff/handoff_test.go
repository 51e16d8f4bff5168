package handoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel/pvhkerneltest"
	"github.com/virtpod/virtpod/pkg/network/guestnet"
)

// handoff runs one handoff: a runner's server on a socket, an agent that answers with r (and
// with link, when not nil, as the plumbing's IPv6 link). It returns what the runner's Wait got.
func handoff(t *testing.T, r Result, link *os.File) (*guestnet.Plumbing, error) {
	t.Helper()
	pl, _, err := handoffKernel(t, r, link, nil, nil)
	return pl, err
}

// handoffKernel is handoff with the runner handing over bz too (nil: none); the agent checks
// it received the same file and answers with r and kernel. It returns the runner's server.
func handoffKernel(t *testing.T, r Result, link, bz, kernel *os.File) (*guestnet.Plumbing, *Server, error) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "netns.sock")
	ns, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ListenKernel(sock, ns, bz)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	agentErr := make(chan error, 1)
	go func() {
		agentErr <- func() error {
			c, err := net.DialUnix("unix", nil, &net.UnixAddr{Net: "unix", Name: sock})
			if err != nil {
				return err
			}
			defer c.Close()
			h, got, gotBz, err := Receive(c)
			if err != nil {
				return err
			}
			got.Close()
			if h.BzImage != (bz != nil) || (gotBz != nil) != (bz != nil) {
				return fmt.Errorf("hello %+v with bzImage %v, want one exactly when the runner has one", h, gotBz)
			}
			if gotBz != nil {
				a, _ := bz.Stat()
				b, _ := gotBz.Stat()
				gotBz.Close()
				if !os.SameFile(a, b) {
					return errors.New("the agent received another file than the runner's bzImage")
				}
			}
			if r.Plumbing != nil {
				r.Plumbing.Link6 = link
			}
			r.Kernel = kernel
			return Reply(c, r)
		}()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pl, err := srv.Wait(ctx)
	if aerr := <-agentErr; aerr != nil {
		t.Errorf("the agent's side: %v", aerr)
	}
	return pl, srv, err
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
		if err == nil || !strings.Contains(err.Error(), "want the IPv6 link exactly when the guest has an IPv6 address") {
			t.Errorf("%s: Wait = %v, want the mismatch reported", name, err)
		}
	}
	if pl, err := handoff(t, Result{Plumbing: plumbing(false)}, nil); err != nil || pl.Link6 != nil {
		t.Errorf("IPv4-only: %+v, %v", pl, err)
	}
}

// TestKernelHandedOver: a runner with a bzImage hands it over with its namespace, and gets the
// agent's kernel back, after the IPv6 link when the guest has one: each descriptor where it
// belongs.
func TestKernelHandedOver(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		var link, peer *os.File
		if ipv6 {
			var err error
			if peer, link, err = os.Pipe(); err != nil {
				t.Fatal(err)
			}
		}
		bz, vmlinux := pvhkerneltest.Open(t, []byte("bzImage")), pvhkerneltest.Open(t, []byte("the PVH kernel"))
		pl, srv, err := handoffKernel(t, Result{Plumbing: plumbing(ipv6)}, link, bz, vmlinux)
		if err != nil {
			t.Fatalf("ipv6 %v: %v", ipv6, err)
		}
		kernel := srv.Kernel()
		k := kernel.File
		if k == nil {
			t.Fatalf("ipv6 %v: no kernel (%q)", ipv6, kernel.Refused)
		}
		b, _ := io.ReadAll(k)
		k.Close()
		if string(b) != "the PVH kernel" || kernel.Refused != "" {
			t.Errorf("ipv6 %v: the kernel handed back reads %q (refused %q), want the agent's file", ipv6, b, kernel.Refused)
		}
		if ipv6 {
			link.Close()
			if _, err := pl.Link6.Write([]byte("frame")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 8)
			if n, _ := peer.Read(buf); string(buf[:n]) != "frame" {
				t.Errorf("the IPv6 link reads %q, want it the pipe the agent sent", buf[:n])
			}
			pl.Link6.Close()
			peer.Close()
		}
	}
}

// TestKernelRefused: a kernel the agent cannot unpack is not the network's failure: the runner
// gets its plumbing and the reason. An agent that sends no kernel and no reason is an error.
func TestKernelRefused(t *testing.T) {
	bz := pvhkerneltest.Open(t, []byte("bzImage"))
	_, srv, err := handoffKernel(t, Result{Plumbing: plumbing(false), KernelRefused: "the kernel has no PVH entry"}, nil, bz, nil)
	if err != nil {
		t.Fatal(err)
	}
	if k := srv.Kernel(); k.File != nil || k.Refused != "the kernel has no PVH entry" {
		t.Errorf("Kernel() = %v, %q; want none and the agent's reason", k.File, k.Refused)
	}
	if _, _, err := handoffKernel(t, Result{Plumbing: plumbing(false)}, nil, bz, nil); err == nil || !strings.Contains(err.Error(), "the kernel exactly when one was asked for") {
		t.Errorf("no kernel and no reason: %v, want it reported", err)
	}
}

// TestReceiveWantsTheDescriptorsTheHelloNames: a Hello that says a bzImage follows must bring
// it, and one that does not must bring nothing more than the namespace.
func TestReceiveWantsTheDescriptorsTheHelloNames(t *testing.T) {
	ns, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	extra := pvhkerneltest.Open(t, []byte("x"))
	for name, tc := range map[string]struct {
		hello string
		fds   []int
	}{
		"bzImage said, not sent": {`{"plumbed":false,"bzImage":true}`, []int{int(ns.Fd())}},
		"sent, not said":         {`{"plumbed":false}`, []int{int(ns.Fd()), int(extra.Fd())}},
		"not a namespace":        {`{"plumbed":false}`, []int{int(extra.Fd())}},
	} {
		a, b, err := unixPair()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := a.WriteMsgUnix([]byte(tc.hello+"\n"), unix.UnixRights(tc.fds...), nil); err != nil {
			t.Fatal(err)
		}
		if _, gotNS, gotBz, err := Receive(b); err == nil {
			gotNS.Close()
			if gotBz != nil {
				gotBz.Close()
			}
			t.Errorf("%s: received, want refused", name)
		}
		a.Close()
		b.Close()
	}
}

func unixPair() (*net.UnixConn, *net.UnixConn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return nil, nil, err
	}
	conn := func(fd int) (*net.UnixConn, error) {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
	a, err := conn(fds[0])
	if err != nil {
		return nil, nil, err
	}
	b, err := conn(fds[1])
	return a, b, err
}
