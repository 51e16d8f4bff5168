// Package podnetwork is what the node agent builds in a runner pod's network namespace so
// that a runner without capabilities can run the guest there (docs/runner.md, "The guest's
// network"): the bridge and a persistent tap the runner's user owns (pkg/network/guestnet), the relay
// path or the masquerade NAT (pkg/network/podnat), and the spoof guard (pkg/network/spoofguard). It changes
// only what is inside that namespace and removes nothing the pod owns; the namespace, and all
// of it, goes with the pod.
package podnetwork

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/handoff"
	"github.com/virtpod/virtpod/pkg/network/guestnet"
	"github.com/virtpod/virtpod/pkg/network/ipv6serve"
	"github.com/virtpod/virtpod/pkg/network/podnat"
	"github.com/virtpod/virtpod/pkg/network/spoofguard"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// Request is what to build, read from the runner pod's spec (RequestFor), which only the
// controller writes: never from the runner.
type Request struct {
	Mode   vmv1.NetworkMode // vmv1.NetworkPod or NetworkMasquerade
	VMName string           // masquerade MACs are derived from it
	Ports  []runnerconfig.Port
	Owner  guestnet.TapOwner
	// Interface is the pod's interface the guest takes over or sits behind.
	Interface string
	// PodIP, when known, must be the interface's address: a namespace that holds another is
	// not this pod's, and is refused.
	PodIP net.IP
}

// RequestFor reads the request from the runner container's arguments and the pod's security
// context. ok is false for a VM with no network (--network=none): nothing to build.
func RequestFor(pod *corev1.Pod) (r Request, ok bool, err error) {
	c := runnerpod.Container(pod)
	if c == nil {
		return r, false, fmt.Errorf("pod %s/%s has no %s container", pod.Namespace, pod.Name, vmv1.RunnerContainer)
	}
	cfg, err := runnerpod.Config(pod)
	if err != nil {
		return r, false, fmt.Errorf("pod %s/%s: the runner's arguments: %w", pod.Namespace, pod.Name, err)
	}
	if cfg.Network == vmv1.NetworkNone {
		return r, false, nil
	}
	// The container's user and group, as the kubelet resolves them: its own over the pod's.
	uid, gid := vmv1.RunnerUID, vmv1.RunnerGID
	runAs := func(user, group *int64) {
		if user != nil {
			uid = *user
		}
		if group != nil {
			gid = *group
		}
	}
	if sc := pod.Spec.SecurityContext; sc != nil {
		runAs(sc.RunAsUser, sc.RunAsGroup)
	}
	if sc := c.SecurityContext; sc != nil {
		runAs(sc.RunAsUser, sc.RunAsGroup)
	}
	r = Request{Mode: cfg.Network, VMName: cfg.Name, Ports: cfg.Ports, Owner: guestnet.TapOwner{UID: uint32(uid), GID: uint32(gid)},
		Interface: "eth0", PodIP: net.ParseIP(pod.Status.PodIP)}
	return r, true, nil
}

// Setup builds r in the network namespace nsfd refers to and returns what the runner needs to
// know of it. It may run again over its own unfinished work (an agent restarted half-way).
func Setup(nsfd int, r Request) (*guestnet.Plumbing, error) {
	var pl *guestnet.Plumbing
	err := guestnet.InNetns(nsfd, func() error {
		var err error
		pl, err = setup(r)
		return err
	})
	return pl, err
}

func setup(r Request) (*guestnet.Plumbing, error) {
	pod, err := discover(r.Interface)
	if err != nil {
		return nil, err
	}
	if r.PodIP != nil && !slices.ContainsFunc([]*net.IPNet{pod.Addr, pod.Addr6}, func(a *net.IPNet) bool { return a != nil && a.IP.Equal(r.PodIP) }) {
		return nil, fmt.Errorf("the network namespace handed over holds %v and %v, not the pod's IP %s: not this pod's; refused", pod.Addr, pod.Addr6, r.PodIP)
	}
	var (
		pl    *guestnet.Plumbing
		relay *spoofguard.Relay
	)
	switch r.Mode {
	case vmv1.NetworkMasquerade:
		if pl, err = guestnet.PlumbMasquerade(pod, r.VMName, guestnet.DefaultBridge, guestnet.DefaultTap, r.Owner); err != nil {
			return nil, err
		}
		nat := podnat.Config{PodInterface: pod.Name, Bridge: pl.Bridge}
		if pod.Addr != nil {
			nat.PodIP, nat.GuestIP = pod.Addr.IP, pl.Guest.Addr.IP
		}
		if pod.Addr6 != nil {
			nat.PodIP6, nat.GuestIP6 = pod.Addr6.IP, pl.Guest.Addr6.IP
		}
		for _, p := range r.Ports {
			nat.Ports = append(nat.Ports, podnat.Port{Protocol: p.Protocol, Port: uint16(p.Port)})
		}
		if err := podnat.Install(nat); err != nil {
			return nil, err
		}
	case vmv1.NetworkPod:
		if pl, err = guestnet.Plumb(pod, guestnet.DefaultBridge, guestnet.DefaultTap, r.Owner); err != nil {
			return nil, err
		}
		// The runner's own path to the guest, for its port relay, probe and DHCP answers.
		if err := pl.AddRelay(); err != nil {
			return nil, err
		}
		// The guest's packets to the relay address are turned to the bridge before the guard
		// judges them (IPv4: an IPv6-only guest reaches the link-local relay on its own link).
		if pod.Addr != nil {
			relay = &spoofguard.Relay{IP: guestnet.RelayIP, BridgeMAC: pl.BridgeMAC}
		}
	default:
		return nil, fmt.Errorf("network mode %q: want %s or %s", r.Mode.Flag(), vmv1.NetworkPod.Flag(), vmv1.NetworkMasquerade.Flag())
	}
	var ip, ip6 net.IP
	if pl.Guest.Addr != nil {
		ip = pl.Guest.Addr.IP
	}
	if pl.Guest.Addr6 != nil {
		ip6 = pl.Guest.Addr6.IP
		// The runner's link to the guest for its IPv6 configuration: only the agent may open it.
		if pl.Router6 == nil {
			return nil, fmt.Errorf("the pod has the IPv6 address %s but no IPv6 default route: the guest would have no way out in IPv6", pl.Guest.Addr6)
		}
		if pl.Link6, err = ipv6serve.OpenLink(pl.Tap); err != nil {
			return nil, err
		}
	}
	// The guest may speak only as itself (docs/security.md).
	if err := spoofguard.Install(pl.Tap, pl.GuestMAC, ip, ip6, pl.BridgeMAC, relay); err != nil {
		if pl.Link6 != nil {
			pl.Link6.Close()
		}
		return nil, err
	}
	return pl, nil
}

// discover reads the pod interface, or the identity an earlier, unfinished plumbing saved.
func discover(ifName string) (guestnet.PodInterface, error) {
	pod, err := guestnet.Discover(ifName, "")
	if err == nil {
		return pod, nil
	}
	resumed, ok, rerr := guestnet.Resume(pod, guestnet.DefaultBridge)
	if rerr != nil {
		return pod, rerr
	}
	if ok {
		return resumed, nil
	}
	return pod, err
}

// Dropped reads the spoof guard's counters in the namespace nsfd refers to.
func Dropped(nsfd int) (map[string]uint64, error) {
	var m map[string]uint64
	err := guestnet.InNetns(nsfd, func() error {
		var err error
		m, err = spoofguard.Dropped()
		return err
	})
	return m, err
}

// String names a request in logs.
func (r Request) String() string {
	return r.Mode.Flag() + " network of VM " + r.VMName + " for uid " + strconv.FormatUint(uint64(r.Owner.UID), 10)
}

// ErrNoHandoff is in Handle's error when the runner handed nothing over (the connection broke
// first): nothing was built or told, so the handoff may be tried again.
var ErrNoHandoff = errors.New("no handoff from the runner")

// Kernels hands out the PVH kernel inside a VM's bzImage (pkg/kernel/kernelcache), or says why not.
type Kernels interface {
	Open(bz *os.File) (*os.File, error)
}

// Handle is the agent's side of one handoff (pkg/handoff) on a connection to a runner's
// netns.sock: it takes the runner's network namespace and, unless the runner says it is
// plumbed already, builds r there and answers with the plumbing or the error; to a runner that
// handed over its VM's bzImage too, with the kernel from kernels (nil: none, and says so). It
// returns the namespace (the caller closes it; the spoof guard's counters are read there) and
// whether it built anything now. An error is also the runner's answer when it could be sent;
// a kernel refused is not an error (the runner boots the bzImage itself).
func Handle(c *net.UnixConn, r Request, kernels Kernels) (ns *os.File, built bool, err error) {
	h, ns, bz, err := handoff.Receive(c)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrNoHandoff, err)
	}
	if bz != nil {
		defer bz.Close()
	}
	if h.Plumbed {
		return ns, false, nil
	}
	pl, err := Setup(int(ns.Fd()), r)
	if err != nil {
		if rerr := handoff.Reply(c, handoff.Result{Error: err.Error()}); rerr != nil {
			err = fmt.Errorf("%w (and telling the runner: %v)", err, rerr)
		}
		ns.Close()
		return nil, false, err
	}
	res := handoff.Result{Plumbing: pl}
	if bz != nil {
		res.Kernel, res.KernelRefused = kernel(kernels, bz)
	}
	err = handoff.Reply(c, res)
	if pl.Link6 != nil {
		pl.Link6.Close() // the runner's now
	}
	if res.Kernel != nil {
		res.Kernel.Close()
	}
	if err != nil {
		ns.Close()
		return nil, true, fmt.Errorf("telling the runner its network is plumbed: %w", err)
	}
	return ns, true, nil
}

// kernel is the PVH kernel for bzImage bz, or why there is none.
func kernel(kernels Kernels, bz *os.File) (*os.File, string) {
	if kernels == nil {
		return nil, "this node agent unpacks no kernels"
	}
	k, err := kernels.Open(bz)
	if err != nil {
		return nil, err.Error()
	}
	return k, ""
}
