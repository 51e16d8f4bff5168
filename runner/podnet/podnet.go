// Package podnet is the runner's half of the guest's network in its pod: it hands the pod's
// network namespace (and a bzImage kernel) to the node agent and waits for the plumbing, opens
// the tap, and serves what the guest needs on ordinary sockets: DHCP, IPv6 answers, the port
// relay from the pod's loopback and the readiness probe.
package podnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/handoff"
	"github.com/virtpod/virtpod/pkg/network/guestnet"
	"github.com/virtpod/virtpod/pkg/network/ipv6serve"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/status"
)

// Network is the guest's wiring in the pod for one run.
type Network struct {
	Plumbing *guestnet.Plumbing // nil with --network=none
	IPArg    string             // the kernel's ip= argument; "" with no network
	stops    []func()
	socket   string // netns.sock, in the control directory the device's next pod gets

	// Kernel is the node agent's answer to the bzImage handed over with the namespace: the PVH
	// kernel inside it (closed by Close), or why there is none.
	Kernel handoff.Kernel
}

// Options are what Setup needs of the runner's own settings.
type Options struct {
	ResolvConf string // the pod's resolv.conf, whose servers the guest is given
	Log        *zap.Logger
}

// Close stops what Setup started, last first. The devices and tables stay: they are
// the pod's, gone with its namespace. netns.sock goes first: a stop that hangs, then is killed,
// must not leave it in the control directory.
func (n *Network) Close() {
	if n.socket != "" {
		_ = os.Remove(n.socket)
	}
	for i := len(n.stops) - 1; i >= 0; i-- {
		n.stops[i]()
	}
}

// WaitingForAgent is the runner's state while the node agent has not plumbed the pod network.
const WaitingForAgent = "waiting for the node agent to plumb the pod network"

// Setup wires the guest into the pod's namespace as cfg.Network says (docs/runner.md).
// The runner holds no capability, so the node agent builds the wiring (pkg/network/podnetwork): the
// runner hands it the pod's network namespace on its control directory's netns.sock and waits
// (pkg/handoff), then opens the tap the agent made its own:
//
//   - pod: the guest takes over the pod interface's IP and MAC through a bridge; the runner
//     reaches it from the link-local relay address.
//   - masquerade: the guest keeps 10.0.2.2 behind the bridge's 10.0.2.1, with MACs from the VM's
//     name, so its configuration survives a move to another pod; the pod IP's declared ports
//     are DNATed to it and its own traffic masqueraded (pkg/network/podnat); the runner reaches it at
//     10.0.2.2 from 10.0.2.1.
//
// Either way the agent's spoof guard keeps the guest to its own MAC and address, and the
// runner serves its DHCP, relays its TCP ports from the pod's loopback and runs its readiness
// probe, all on ordinary sockets. On error, what was started is stopped.
//
// bz, when not nil, is the VM's kernel, a bzImage, handed to the agent with the namespace for
// the PVH kernel inside it (Network.Kernel).
func Setup(ctx context.Context, cfg runnerconfig.Config, o Options, board *status.Board, bz *os.File) (_ *Network, err error) {
	log := o.Log
	n := &Network{}
	if cfg.Network == vmv1.NetworkNone {
		return n, nil
	}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if cfg.ControlSocket == "" {
		return nil, errors.New("the node agent plumbs the guest's network through the control directory: --control-socket must not be empty")
	}
	dns, search, err := guestnet.ReadResolvConf(o.ResolvConf)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	pl, err := waitPlumbing(ctx, filepath.Join(filepath.Dir(cfg.ControlSocket), vmv1.NetnsSocketName), bz, board, n, log)
	if err != nil {
		return nil, err
	}
	if pl.Link6 != nil {
		link := pl.Link6
		n.stops = append(n.stops, func() { link.Close() }) // Serve's, once it runs; here if it never does
	}
	pl.WithResolver(dns, search)
	// The runner's own address towards the guest, and the guest's it reaches from there.
	src, guestIP := &net.TCPAddr{IP: guestnet.RelayIP}, pl.Guest.Addr
	if guestIP == nil { // IPv6-only: the link-local relay address, on the bridge
		src, guestIP = &net.TCPAddr{IP: guestnet.RelayIP6, Zone: pl.Bridge}, pl.Guest.Addr6
	}
	if cfg.Network == vmv1.NetworkMasquerade {
		if err := guestnet.MasqueradeOverlap(pl.Pod); err != nil {
			return nil, err
		}
		src = &net.TCPAddr{IP: guestnet.MasqueradeGatewayIP}
		if pl.Guest.Addr == nil {
			src = &net.TCPAddr{IP: guestnet.MasqueradeGatewayIP6}
		}
	}
	// cloud-hypervisor opens the tap by name; QEMU is handed an open queue.
	if cfg.Provider == runnerconfig.ProviderQEMU {
		if pl.TapFile, err = guestnet.OpenTap(pl.Tap); err != nil {
			return nil, err
		}
		tap := pl.TapFile
		n.stops = append(n.stops, func() { tap.Close() })
	}
	n.Plumbing = pl
	n.stops = append(n.stops, startRelay(cfg.Ports, guestIP.IP, src, log).Close)
	if cfg.ReadinessProbe.IsSet() {
		probe := NewProbe(cfg.ReadinessProbe, guestIP.IP, src, log)
		probeCtx, stopProbe := context.WithCancel(ctx)
		n.stops = append(n.stops, stopProbe)
		go probe.Run(probeCtx)
		board.SetProbe(probe)
	}
	if pl.Guest.Addr != nil {
		dhcpCtx, stopDHCP := context.WithCancel(ctx)
		n.stops = append(n.stops, stopDHCP)
		if err := startDHCP(dhcpCtx, pl, src.IP, cfg.Name, log); err != nil {
			if cfg.Kernel == "" { // a disk's own OS configures its network by DHCP
				return nil, err
			}
			log.Warn("no DHCP server; the guest has its address from ip=", zap.Error(err))
		}
	}
	if pl.Link6 != nil {
		if err := startIPv6(ctx, pl, n, log); err != nil {
			return nil, err
		}
	}
	n.IPArg = pl.Guest.KernelIPArg(cfg.Name)
	log.Info("guest network", zap.String("mode", cfg.Network.Flag()), zap.Stringer("ip", pl.Guest.Addr), zap.Stringer("ip6", pl.Guest.Addr6), zap.Stringer("gateway", pl.Guest.Gateway),
		zap.Stringer("podIP", pl.Pod.Addr), zap.Stringer("podIP6", pl.Pod.Addr6), zap.Stringer("guestMAC", pl.GuestMAC), zap.Stringer("podMAC", pl.PodMAC), zap.String("tap", pl.Tap))
	return n, nil
}

// startIPv6 serves the guest's IPv6 configuration in a dual-stack pod on the link the agent
// handed over (pkg/network/ipv6serve) until the run ends, and logs every answer.
// On error the link is left to the stop Setup registered for it.
func startIPv6(ctx context.Context, pl *guestnet.Plumbing, n *Network, log *zap.Logger) error {
	if pl.Router6 == nil {
		return fmt.Errorf("the node agent handed over an IPv6 link but no IPv6 router for %s", pl.Guest.Addr6)
	}
	c := ipv6serve.Config{
		GuestMAC: pl.GuestMAC, Addr: pl.Guest.Addr6, RouterIP: pl.Router6.IP, RouterMAC: pl.Router6.MAC,
		DNS: pl.Guest.DNS6, Search: pl.Guest.Search, MTU: pl.Guest.MTU,
	}
	if err := c.Validate(); err != nil {
		return err
	}
	sctx, stop := context.WithCancel(ctx)
	n.stops = append(n.stops, stop)
	go func() {
		if err := ipv6serve.Serve(sctx, pl.Link6, c, func(what string) { log.Info("ipv6 answer", zap.String("answer", what)) }); err != nil {
			log.Error("ipv6 server stopped", zap.Error(err))
		}
	}()
	log.Info("ipv6 server", zap.String("address", c.Addr.String()), zap.Stringer("router", c.RouterIP), zap.Stringer("routerMAC", c.RouterMAC), zap.Int("dns", len(c.DNS)))
	return nil
}

// waitPlumbing hands the pod's network namespace to the node agent on socket and waits for its
// plumbing, saying so in the runner's status meanwhile. The socket keeps answering (later
// agents learn the namespace is plumbed) until the run ends.
func waitPlumbing(ctx context.Context, socket string, bz *os.File, board *status.Board, n *Network, log *zap.Logger) (*guestnet.Plumbing, error) {
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return nil, fmt.Errorf("control directory: %w", err)
	}
	srv, err := handoff.Listen(socket, bz)
	if err != nil {
		return nil, err
	}
	n.stops = append(n.stops, func() { _ = srv.Close() })
	n.socket = socket
	board.Set(status.StatePreparing, WaitingForAgent)
	log.Info(WaitingForAgent, zap.String("socket", socket))
	start := time.Now()
	pl, err := srv.Wait(ctx)
	if err != nil {
		return nil, err
	}
	if n.Kernel = srv.Kernel(); n.Kernel.File != nil {
		k := n.Kernel.File
		n.stops = append(n.stops, func() { k.Close() })
	}
	if pl.Guest.Addr == nil && pl.Guest.Addr6 == nil || len(pl.GuestMAC) != 6 || pl.Tap == "" || pl.Bridge == "" {
		return nil, fmt.Errorf("the node agent's plumbing is incomplete: %+v", pl)
	}
	board.Set(status.StatePreparing, "")
	log.Info("pod network plumbed by the node agent", zap.Duration("waited", time.Since(start)), zap.String("bridge", pl.Bridge), zap.String("tap", pl.Tap))
	return pl, nil
}
