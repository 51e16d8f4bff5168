// Package podnat forwards a pod's traffic to a guest behind NAT in the pod's network namespace
// (the runner's masquerade network mode): the pod IP's declared ports are DNATed to the guest's
// fixed address, the guest's own traffic leaving through the pod interface is masqueraded to the
// pod IP, and nothing else is forwarded between the pod network and the guest. In a dual-stack
// pod the same holds for IPv6 (NAT66), in a table of the ip6 family.
//
// The rules are data (Rules) so they can be read and golden-tested without a kernel; Install
// turns them into one nftables table through netlink (github.com/google/nftables), never an
// iptables or nft binary.
package podnat

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// Table is the nftables table (ip family, and ip6 in a dual-stack pod) that holds the NAT in the
// pod's namespace.
const Table = "virtpod-nat"

// Chain names a base chain of the table; each has a fixed type, hook and priority (Install).
type Chain string

// The table's chains.
const (
	Prerouting  Chain = "prerouting"  // nat, dstnat: the declared ports to the guest
	Forward     Chain = "forward"     // filter, policy drop: what may pass between pod network and guest
	Postrouting Chain = "postrouting" // nat, srcnat: the guest's traffic as the pod IP
)

// Chains lists the chains in the order Install creates them.
var Chains = []Chain{Prerouting, Forward, Postrouting}

// Action is what a matching rule does.
type Action int

// Actions.
const (
	Accept Action = iota
	Drop
	DNAT // to Rule.To, the port unchanged
	Masquerade
)

// Port is a guest port forwarded from the pod IP.
type Port struct {
	Protocol string // TCP or UDP
	Port     uint16
}

// Config is what the NAT joins.
type Config struct {
	PodInterface string // the pod's interface, as the CNI plugin made it
	PodIP        net.IP
	Bridge       string // the runner's bridge, where the guest is
	GuestIP      net.IP
	// PodIP6 and GuestIP6: the pod's and the guest's IPv6 addresses in a dual-stack pod (else nil).
	PodIP6, GuestIP6 net.IP
	Ports            []Port
}

// Rule matches when every set field holds.
type Rule struct {
	Chain        Chain
	IIf, OIf     string // interface names
	SAddr, DAddr net.IP
	Proto        string // "tcp" or "udp"; with DPort
	DPort        uint16
	// CtEstablished: the packet belongs to a connection already seen both ways, or related to
	// one (an ICMP error). CtDNAT: its connection was DNATed here.
	CtEstablished bool
	CtDNAT        bool
	Action        Action
	To            net.IP // DNAT's new destination
	IPv6          bool   // the rule is the ip6 table's
}

// Rules are the table's rules for c, chain by chain in order.
func Rules(c Config) ([]Rule, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	var rules []Rule
	if c.PodIP != nil {
		rules = c.familyRules(c.PodIP.To4(), c.GuestIP.To4())
	}
	if c.PodIP6 != nil {
		six := c.familyRules(c.PodIP6.To16(), c.GuestIP6.To16())
		for i := range six {
			six[i].IPv6 = true
		}
		rules = append(rules, six...)
	}
	return rules, nil
}

// familyRules are one table's rules: the pod's and guest's addresses of one family.
func (c Config) familyRules(pod, guest net.IP) []Rule {
	var rules []Rule
	for _, p := range c.Ports {
		rules = append(rules, Rule{Chain: Prerouting, IIf: c.PodInterface, DAddr: pod, Proto: strings.ToLower(p.Protocol), DPort: p.Port,
			Action: DNAT, To: guest})
	}
	return append(rules,
		// Replies, both ways: to the guest's outgoing connections and from its forwarded ports.
		Rule{Chain: Forward, CtEstablished: true, Action: Accept},
		// The guest's new connections out to the pod network and beyond.
		Rule{Chain: Forward, IIf: c.Bridge, OIf: c.PodInterface, SAddr: guest, Action: Accept},
		// New connections to the guest only through a declared port's DNAT: a pod network host
		// that routes the guest's address to this pod reaches nothing else.
		Rule{Chain: Forward, IIf: c.PodInterface, OIf: c.Bridge, DAddr: guest, CtDNAT: true, Action: Accept},
		Rule{Chain: Forward, Action: Drop},
		Rule{Chain: Postrouting, OIf: c.PodInterface, SAddr: guest, Action: Masquerade},
	)
}

func (c Config) validate() error {
	var errs []error
	for what, name := range map[string]string{"pod interface": c.PodInterface, "bridge": c.Bridge} {
		if name == "" || len(name) >= 16 {
			errs = append(errs, fmt.Errorf("%s name %q must have 1-15 characters", what, name))
		}
	}
	// An IPv6-only pod has no IPv4 addresses to join; otherwise both are needed.
	if c.PodIP != nil || c.GuestIP != nil || c.PodIP6 == nil {
		if c.PodIP.To4() == nil || c.PodIP.IsUnspecified() {
			errs = append(errs, fmt.Errorf("pod IP %q is not a usable IPv4 address", c.PodIP))
		}
		if c.GuestIP.To4() == nil || c.GuestIP.IsUnspecified() {
			errs = append(errs, fmt.Errorf("guest IP %q is not a usable IPv4 address", c.GuestIP))
		}
	}
	if (c.PodIP6 == nil) != (c.GuestIP6 == nil) {
		errs = append(errs, fmt.Errorf("pod IPv6 %q and guest IPv6 %q: give both or neither", c.PodIP6, c.GuestIP6))
	}
	for what, ip := range map[string]net.IP{"pod IPv6": c.PodIP6, "guest IPv6": c.GuestIP6} {
		if ip != nil && (ip.To4() != nil || !ip.IsGlobalUnicast()) {
			errs = append(errs, fmt.Errorf("%s %q is not a global IPv6 address", what, ip))
		}
	}
	for _, p := range c.Ports {
		if p.Port == 0 || (p.Protocol != "TCP" && p.Protocol != "UDP") {
			errs = append(errs, fmt.Errorf("port %d/%s: want a port 1-65535, TCP or UDP", p.Port, p.Protocol))
		}
	}
	return errors.Join(errs...)
}

// String renders a rule the way nft would list it, for logs, docs and golden tests.
func (r Rule) String() string {
	var parts []string
	if r.IIf != "" {
		parts = append(parts, fmt.Sprintf("iifname %q", r.IIf))
	}
	if r.OIf != "" {
		parts = append(parts, fmt.Sprintf("oifname %q", r.OIf))
	}
	ip := "ip"
	if r.IPv6 {
		ip = "ip6"
	}
	if r.SAddr != nil {
		parts = append(parts, ip+" saddr "+r.SAddr.String())
	}
	if r.DAddr != nil {
		parts = append(parts, ip+" daddr "+r.DAddr.String())
	}
	if r.Proto != "" {
		parts = append(parts, fmt.Sprintf("%s dport %d", r.Proto, r.DPort))
	}
	if r.CtEstablished {
		parts = append(parts, "ct state established,related")
	}
	if r.CtDNAT {
		parts = append(parts, "ct status dnat")
	}
	switch r.Action {
	case Accept:
		parts = append(parts, "accept")
	case Drop:
		parts = append(parts, "drop")
	case DNAT:
		parts = append(parts, "dnat to "+r.To.String())
	case Masquerade:
		parts = append(parts, "masquerade")
	}
	return strings.Join(parts, " ")
}
