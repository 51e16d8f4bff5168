package runner

import (
	"context"
	"net"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/guestnet"
	"github.com/virtpod/virtpod/pkg/podnat"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/spoofguard"
)

// guestNetwork is the guest's wiring in the pod for one run.
type guestNetwork struct {
	plumbing *guestnet.Plumbing // nil with --network=none
	ipArg    string             // the kernel's ip= argument; "" with no network
	stops    []func()
}

// close stops what setupNetwork started, last first. The devices and tables stay: they are
// gone with the pod's namespace, and a runner restarted in the pod replaces them.
func (n *guestNetwork) close() {
	for i := len(n.stops) - 1; i >= 0; i-- {
		n.stops[i]()
	}
}

// setupNetwork wires the guest into the pod's namespace as cfg.Network says (docs/runner.md):
//
//   - pod: the guest takes over the pod interface's IP and MAC through a bridge; the runner
//     reaches it from the link-local relay address.
//   - masquerade: the guest keeps 10.0.2.2 behind the bridge's 10.0.2.1, with MACs from the VM's
//     name, so its configuration survives a move to another pod; the pod IP's declared ports
//     are DNATed to it and its own traffic masqueraded (pkg/podnat); the runner reaches it at
//     10.0.2.2 from 10.0.2.1.
//
// Either way the spoof guard keeps the guest to its own MAC and address, the runner serves its
// DHCP, relays its TCP ports from the pod's loopback and runs its readiness probe. On error,
// what was started is stopped.
func setupNetwork(ctx context.Context, cfg runnerconfig.Config, o Options, board *statusBoard) (_ *guestNetwork, err error) {
	log := o.Log
	n := &guestNetwork{}
	if cfg.Network == runnerconfig.NetworkNone {
		return n, nil
	}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	pod, err := guestnet.Discover(o.PodInterface, o.ResolvConf)
	if err != nil {
		return nil, err
	}
	// cloud-hypervisor opens the tap by name, so it must outlive the runner's handle.
	keepOpen := cfg.Provider == runnerconfig.ProviderQEMU
	var (
		pl    *guestnet.Plumbing
		relay *spoofguard.Relay
		src   net.IP // the runner's own address towards the guest
	)
	switch cfg.Network {
	case runnerconfig.NetworkMasquerade:
		if pl, err = guestnet.PlumbMasquerade(pod, cfg.Name, guestnet.DefaultBridge, guestnet.DefaultTap, keepOpen); err != nil {
			return nil, err
		}
		nat := podnat.Config{PodInterface: pod.Name, PodIP: pod.Addr.IP, Bridge: pl.Bridge, GuestIP: pl.Guest.Addr.IP}
		for _, p := range cfg.Ports {
			nat.Ports = append(nat.Ports, podnat.Port{Protocol: p.Protocol, Port: uint16(p.Port)})
		}
		if err := podnat.Install(nat); err != nil {
			return nil, err
		}
		log.Info("guest NAT", zap.Stringer("podIP", pod.Addr.IP), zap.Stringer("guestIP", pl.Guest.Addr.IP), zap.Int("ports", len(nat.Ports)),
			zap.String("table", podnat.Table), zap.Strings("forwarding", []string{pod.Name, pl.Bridge}))
		src = guestnet.MasqueradeGatewayIP
	default:
		if pl, err = guestnet.Plumb(pod, guestnet.DefaultBridge, guestnet.DefaultTap, keepOpen); err != nil {
			return nil, err
		}
		// The runner's own path to the guest, for the port relay (docs/runner.md).
		if err := pl.AddRelay(); err != nil {
			return nil, err
		}
		// The guest's replies to the relay address are turned to the bridge before the guard
		// judges them.
		relay = &spoofguard.Relay{IP: guestnet.RelayIP, BridgeMAC: pl.BridgeMAC}
		src = guestnet.RelayIP
	}
	n.plumbing = pl
	guestIP := pl.Guest.Addr.IP
	// The guest may speak only as itself (docs/security.md).
	if err := spoofguard.Install(pl.Tap, pl.GuestMAC, guestIP, relay); err != nil {
		return nil, err
	}
	n.stops = append(n.stops, startRelay(cfg.Ports, guestIP, src, log).Close)
	if cfg.ReadinessProbe.IsSet() {
		probe := newGuestProbe(cfg.ReadinessProbe, guestIP, src, log)
		probeCtx, stopProbe := context.WithCancel(ctx)
		n.stops = append(n.stops, stopProbe)
		go probe.run(probeCtx)
		board.setProbe(probe)
	}
	board.setDropped(spoofguard.Dropped)
	dhcpCtx, stopDHCP := context.WithCancel(ctx)
	n.stops = append(n.stops, stopDHCP)
	if err := startDHCP(dhcpCtx, pl, cfg.Name, log); err != nil {
		if cfg.Kernel == "" { // a disk's own OS configures its network by DHCP
			return nil, err
		}
		log.Warn("no DHCP server; the guest has its address from ip=", zap.Error(err))
	}
	n.ipArg = pl.Guest.KernelIPArg(cfg.Name)
	log.Info("guest network", zap.String("mode", cfg.Network), zap.String("ip", pl.Guest.Addr.String()), zap.Stringer("gateway", pl.Guest.Gateway),
		zap.Stringer("podIP", pod.Addr.IP), zap.Stringer("guestMAC", pl.GuestMAC), zap.Stringer("podMAC", pl.PodMAC), zap.String("tap", pl.Tap))
	return n, nil
}
