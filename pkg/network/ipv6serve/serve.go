package ipv6serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// filter passes the server only what it answers, and only frames the guest sent (not those the
// tap carries to it): router and neighbour solicitations (ICMPv6 133, 135) and DHCPv6 to the
// server port, in IPv6 with no extension header before them. Offsets count from the Ethernet
// header.
var filter = []bpf.Instruction{
	bpf.LoadExtension{Num: bpf.ExtType},
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PACKET_OUTGOING, SkipTrue: 10},
	bpf.LoadAbsolute{Off: 12, Size: 2},
	bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: etherTypeIPv6, SkipTrue: 8},
	bpf.LoadAbsolute{Off: 20, Size: 1}, // next header
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: protoUDP, SkipTrue: 4},
	bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: protoICMPv6, SkipTrue: 5},
	bpf.LoadAbsolute{Off: 54, Size: 1}, // ICMPv6 type
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: 133, SkipTrue: 4},
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: 135, SkipTrue: 3, SkipFalse: 2},
	bpf.LoadAbsolute{Off: 56, Size: 2}, // UDP destination port
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: portServer, SkipTrue: 1},
	bpf.RetConstant{Val: 0},
	bpf.RetConstant{Val: 1 << 16},
}

// OpenLink opens the server's link on ifname (the guest's tap) in the current network
// namespace: a packet socket for IPv6 frames, filtered to what the server answers. It needs
// CAP_NET_RAW (the node agent's); the socket keeps working for whoever it is handed to.
func OpenLink(ifname string) (*os.File, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("ipv6 link: %w", err)
	}
	prog, err := bpf.Assemble(filter)
	if err != nil {
		return nil, fmt.Errorf("ipv6 link: filter: %w", err)
	}
	// Protocol 0 receives nothing until the bind, so no frame arrives unfiltered.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ipv6 link: packet socket: %w (the node agent needs CAP_NET_RAW)", err)
	}
	f := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		f[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ipv6 link: attach filter: %w", err)
	}
	// Every protocol (the filter keeps IPv6): a socket for one protocol is handed frames after
	// the bridge the tap is in has taken them, so never; one for all is handed them first.
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ipv6 link: bind to %s: %w", ifname, err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ipv6 link: %w", err)
	}
	return os.NewFile(uintptr(fd), "ipv6-link:"+ifname), nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Serve answers the guest on link until ctx ends, then closes link. It advertises the router
// at once and every AdvertiseEvery. answered, when not nil, is told of every answer sent.
func Serve(ctx context.Context, link *os.File, c Config, answered func(what string)) error {
	if err := c.Validate(); err != nil {
		link.Close()
		return err
	}
	stop := context.AfterFunc(ctx, func() { link.Close() })
	defer stop()
	send := func(f []byte, what string) error {
		if _, err := link.Write(f); err != nil {
			return fmt.Errorf("ipv6: %s to the guest: %w", what, err)
		}
		if answered != nil {
			answered(what)
		}
		return nil
	}
	go func() {
		t := time.NewTicker(AdvertiseEvery)
		defer t.Stop()
		for {
			if err := send(c.Advertisement(), "unsolicited router advertisement"); err != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	buf := make([]byte, 1<<16)
	for {
		n, err := link.Read(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return fmt.Errorf("ipv6: read the guest's frames: %w", err)
		}
		if reply, what := c.Answer(buf[:n]); reply != nil {
			if err := send(reply, what); err != nil {
				return err
			}
		}
	}
}
