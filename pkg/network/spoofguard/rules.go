// Package spoofguard keeps a guest on the pod network speaking only as itself: a netdev ingress
// filter on the guest's tap passes frames from the guest's own MAC carrying the pod's IPv4
// address (plus ARP probes, which must come from 0.0.0.0), turns the guest's DHCP to the bridge
// itself (the runner answers it there; it never reaches the pod network), and counts and drops
// everything else before it reaches the bridge and the pod network.
//
// In a dual-stack pod it passes IPv6 from the pod's IPv6 address and the guest's link-local
// address (the one its MAC forms, EUI-64), and from :: only duplicate address detection;
// neighbour advertisements only for those two addresses, and no router advertisement or
// redirect. The guest's router solicitations and DHCPv6 are dropped uncounted: the runner
// hears them on its own socket on the tap, which sees a frame before this filter does
// (pkg/network/ipv6serve).
//
// Before the guard, an optional relay rule (RelayRules) steers the guest's replies to the
// runner's link-local relay address to the bridge itself, so the pod's namespace receives them
// (the runner's port relay, docs/runner.md); it changes a destination MAC and decides nothing.
//
// The rules are described as data (Rules) so they can be read and golden-tested without a
// kernel; Install turns them into nftables objects through netlink.
package spoofguard

import (
	"fmt"
	"net"
	"strings"

	"github.com/virtpod/virtpod/pkg/network/guestnet"
)

// Counter names: why a frame was dropped. They are the labels of the runner's drop metric.
const (
	CounterMAC   = "mac"   // a source MAC other than the guest's
	CounterARP   = "arp"   // an ARP sender other than the guest's MAC and the pod IP
	CounterIP    = "ip"    // an IPv4 source other than the pod IP
	CounterIP6   = "ip6"   // an IPv6 source other than the guest's (any IPv6 in an IPv4-only pod)
	CounterND    = "nd"    // a neighbour advertisement for another's address, a router advertisement or redirect
	CounterOther = "other" // any other protocol (VLAN tags, …)
)

// Counters lists every counter, in the order rules use them.
var Counters = []string{CounterMAC, CounterARP, CounterIP, CounterIP6, CounterND, CounterOther}

// Field is a packet field a rule compares.
type Field struct {
	Name   string // as nft spells it
	Base   Base
	Offset uint32
	Len    uint32
}

// Base says which header a field's offset counts from.
type Base int

// Header bases.
const (
	LinkLayer Base = iota
	Network
	Transport
	// Meta is what the kernel found out about the packet, not a header's bytes.
	Meta
)

// Fields the rules use. Offsets are fixed by the protocols: Ethernet (RFC 894), ARP for IPv4 over
// Ethernet (RFC 826), IPv4 (RFC 791), UDP (RFC 768).
var (
	EtherDaddr = Field{"ether daddr", LinkLayer, 0, 6}
	EtherSaddr = Field{"ether saddr", LinkLayer, 6, 6}
	EtherType  = Field{"ether type", LinkLayer, 12, 2}
	ARPSha     = Field{"arp saddr ether", Network, 8, 6}
	ARPSpa     = Field{"arp saddr ip", Network, 14, 4}
	IPProto    = Field{"ip protocol", Network, 9, 1}
	IPSaddr    = Field{"ip saddr", Network, 12, 4}
	IPDaddr    = Field{"ip daddr", Network, 16, 4}
	UDPDport   = Field{"udp dport", Transport, 2, 2}
	// IPv6 (RFC 8200) and ICMPv6 neighbour discovery (RFC 4861). The transport protocol and
	// header are the ones past any extension headers: a neighbour advertisement behind a
	// destination-options header is still one.
	L4Proto   = Field{"meta l4proto", Meta, 0, 1}
	IP6Saddr  = Field{"ip6 saddr", Network, 8, 16}
	ICMP6Type = Field{"icmpv6 type", Transport, 0, 1}
	NDTarget  = Field{"icmpv6 nd target", Transport, 8, 16}
)

// Match compares a field with a value.
type Match struct {
	Field Field
	Equal bool
	Value []byte
}

// Verdict is what a rule does with a matching frame.
type Verdict int

// Verdicts.
const (
	Accept Verdict = iota
	Drop
	// Continue: the next rule sees the frame (after the rule's Set).
	Continue
)

// Set writes Value into a field of a matching frame.
type Set struct {
	Field Field
	Value []byte
}

// Rule matches when every Match holds; Counter (when set) counts the frame, Set (when set)
// changes it, then the verdict applies.
type Rule struct {
	Matches []Match
	Counter string
	Set     *Set
	Verdict Verdict
}

// Relay is the runner's link-local path to the guest's ports: the pod's namespace holds IP on
// the bridge, whose MAC is BridgeMAC.
type Relay struct {
	IP        net.IP
	BridgeMAC net.HardwareAddr
}

// RelayRules are the rules that go before the guard's when the runner relays ports. The guest
// sends its replies to the relay address, which is outside its subnet, to its gateway's MAC;
// the rule gives those frames the bridge's MAC instead, so the bridge hands them to the pod's
// namespace rather than to the pod network. The guest needs no route or address of its own for
// it. The guard's rules still judge each frame afterwards.
func RelayRules(r Relay) ([]Rule, error) {
	ip4 := r.IP.To4()
	if ip4 == nil || !ip4.IsLinkLocalUnicast() {
		return nil, fmt.Errorf("relay address %q is not an IPv4 link-local address (169.254.0.0/16)", r.IP)
	}
	if len(r.BridgeMAC) != 6 {
		return nil, fmt.Errorf("bridge MAC %q is not a 48-bit Ethernet address", r.BridgeMAC)
	}
	return []Rule{{
		Matches: []Match{{EtherType, true, etherTypeIPv4}, {IPDaddr, true, []byte(ip4)}},
		Set:     &Set{Field: EtherDaddr, Value: []byte(r.BridgeMAC)},
		Verdict: Continue,
	}}, nil
}

var (
	etherTypeARP  = []byte{0x08, 0x06}
	etherTypeIPv4 = []byte{0x08, 0x00}
	etherTypeIPv6 = []byte{0x86, 0xdd}
	ipAny         = []byte{0, 0, 0, 0}
	protoUDP      = []byte{17}
	portDHCP      = []byte{0, 67}
)

// Rules are the tap's ingress rules for a guest with this MAC and IPv4 address, and IPv6
// address when ip6 is not nil, evaluated in order; the last drops whatever no earlier rule
// accepted. bridge is the bridge's own MAC, to which the guest's DHCP is turned.
func Rules(mac net.HardwareAddr, ip, ip6 net.IP, bridge net.HardwareAddr) ([]Rule, error) {
	if len(mac) != 6 {
		return nil, fmt.Errorf("guest MAC %q is not a 48-bit Ethernet address", mac)
	}
	if len(bridge) != 6 {
		return nil, fmt.Errorf("bridge MAC %q is not a 48-bit Ethernet address", bridge)
	}
	if ip == nil && ip6 == nil {
		return nil, fmt.Errorf("the guest has no address: want an IPv4 address, an IPv6 one or both")
	}
	rules := []Rule{{Matches: []Match{{EtherSaddr, false, []byte(mac)}}, Counter: CounterMAC, Verdict: Drop}}
	if ip != nil {
		ip4 := ip.To4()
		if ip4 == nil || ip4.Equal(net.IPv4zero) {
			return nil, fmt.Errorf("guest address %q is not a usable IPv4 address", ip)
		}
		rules = append(rules, rules4(mac, ip4, bridge)...)
	}
	if ip6 != nil {
		if ip6.To4() != nil || !ip6.IsGlobalUnicast() {
			return nil, fmt.Errorf("guest address %q is not a global IPv6 address", ip6)
		}
		rules = append(rules, rules6(mac, ip6.To16())...)
	}
	// In an IPv6-only pod, ARP and IPv4 have nowhere to go: they are "other".
	return append(rules, Rule{Matches: []Match{{EtherType, true, etherTypeIPv6}}, Counter: CounterIP6, Verdict: Drop},
		Rule{Counter: CounterOther, Verdict: Drop}), nil
}

// rules4 are the ARP and IPv4 rules for a guest with this MAC and IPv4 address (4 bytes).
func rules4(mac net.HardwareAddr, ip4 net.IP, bridge net.HardwareAddr) []Rule {
	m, a := []byte(mac), []byte(ip4)
	toBridge := &Set{Field: EtherDaddr, Value: []byte(bridge)}
	isARP := Match{EtherType, true, etherTypeARP}
	isIPv4 := Match{EtherType, true, etherTypeIPv4}
	return []Rule{
		{Matches: []Match{isARP, {ARPSha, false, m}}, Counter: CounterARP, Verdict: Drop},
		{Matches: []Match{isARP, {ARPSpa, true, a}}, Verdict: Accept},
		// An ARP probe (RFC 5227) asks about an address before using it, from 0.0.0.0.
		{Matches: []Match{isARP, {ARPSpa, true, ipAny}}, Verdict: Accept},
		{Matches: []Match{isARP}, Counter: CounterARP, Verdict: Drop},
		// DHCP is answered by the runner on a socket bound to the bridge: its broadcasts get the
		// bridge's MAC, so the bridge hands them to the pod's namespace alone and never floods
		// them to the pod network. Not spoofing: discovery comes from 0.0.0.0, renewals from the
		// pod IP.
		{Matches: []Match{isIPv4, {IPSaddr, true, ipAny}, {IPProto, true, protoUDP}, {UDPDport, true, portDHCP}}, Set: toBridge, Verdict: Accept},
		{Matches: []Match{isIPv4, {IPSaddr, true, a}, {IPProto, true, protoUDP}, {UDPDport, true, portDHCP}}, Set: toBridge, Verdict: Accept},
		{Matches: []Match{isIPv4, {IPSaddr, true, a}}, Verdict: Accept},
		{Matches: []Match{isIPv4}, Counter: CounterIP, Verdict: Drop},
	}
}

// ICMPv6 types the IPv6 rules name.
const (
	icmpRouterSolicitation    = 133
	icmpRouterAdvertisement   = 134
	icmpNeighbourSolicitation = 135
	icmpNeighbourAdvert       = 136
	icmpRedirect              = 137
	icmpListenerReport        = 143 // MLDv2
)

// icmp6Names are nft's names of the ICMPv6 types.
var icmp6Names = map[byte]string{
	icmpRouterSolicitation: "nd-router-solicit", icmpRouterAdvertisement: "nd-router-advert",
	icmpNeighbourSolicitation: "nd-neighbor-solicit", icmpNeighbourAdvert: "nd-neighbor-advert",
	icmpRedirect: "nd-redirect", icmpListenerReport: "mld2-listener-report",
}

// rules6 are the IPv6 rules for a guest with this MAC and global address (16 bytes); the IPv4
// rules' last drop of IPv6 follows them.
func rules6(mac net.HardwareAddr, ip6 net.IP) []Rule {
	ll := []byte(guestnet.EUI64LinkLocal(mac))
	isIPv6 := Match{EtherType, true, etherTypeIPv6}
	icmp := Match{L4Proto, true, []byte{58}}
	typ := func(t byte) Match { return Match{ICMP6Type, true, []byte{t}} }
	from := func(a []byte) Match { return Match{IP6Saddr, true, a} }
	own := [][]byte{ll, []byte(ip6)}
	rules := []Rule{
		// Served by the runner, which has heard them already; never for the pod network.
		{Matches: []Match{isIPv6, icmp, typ(icmpRouterSolicitation)}, Verdict: Drop},
		{Matches: []Match{isIPv6, {L4Proto, true, protoUDP}, {UDPDport, true, []byte{0x02, 0x23}}}, Verdict: Drop},
		// A guest is no router.
		{Matches: []Match{isIPv6, icmp, typ(icmpRouterAdvertisement)}, Counter: CounterND, Verdict: Drop},
		{Matches: []Match{isIPv6, icmp, typ(icmpRedirect)}, Counter: CounterND, Verdict: Drop},
	}
	for _, src := range own {
		for _, target := range own {
			rules = append(rules, Rule{Matches: []Match{isIPv6, from(src), icmp, typ(icmpNeighbourAdvert), {NDTarget, true, target}}, Verdict: Accept})
		}
	}
	return append(rules,
		Rule{Matches: []Match{isIPv6, icmp, typ(icmpNeighbourAdvert)}, Counter: CounterND, Verdict: Drop},
		Rule{Matches: []Match{isIPv6, from(ip6)}, Verdict: Accept},
		Rule{Matches: []Match{isIPv6, from(ll)}, Verdict: Accept},
		// Duplicate address detection (RFC 4862) and its multicast listener report (RFC 3810)
		// come from :: before the guest holds an address.
		Rule{Matches: []Match{isIPv6, from(make([]byte, 16)), icmp, typ(icmpNeighbourSolicitation)}, Verdict: Accept},
		Rule{Matches: []Match{isIPv6, from(make([]byte, 16)), icmp, typ(icmpListenerReport)}, Verdict: Accept},
	)
}

// String renders a rule the way nft would list it, for logs, docs and golden tests.
func (r Rule) String() string {
	var parts []string
	for _, m := range r.Matches {
		op := "!= "
		if m.Equal {
			op = ""
		}
		parts = append(parts, m.Field.Name+" "+op+formatValue(m.Field, m.Value))
	}
	if r.Counter != "" {
		parts = append(parts, fmt.Sprintf("counter name %q", r.Counter))
	}
	if r.Set != nil {
		parts = append(parts, r.Set.Field.Name+" set "+formatValue(r.Set.Field, r.Set.Value))
	}
	switch r.Verdict {
	case Accept:
		parts = append(parts, "accept")
	case Drop:
		parts = append(parts, "drop")
	}
	return strings.Join(parts, " ")
}

func formatValue(f Field, v []byte) string {
	switch {
	case f == EtherType && len(v) == 2:
		switch {
		case v[0] == 0x08 && v[1] == 0x06:
			return "arp"
		case v[0] == 0x08 && v[1] == 0x00:
			return "ip"
		case v[0] == 0x86 && v[1] == 0xdd:
			return "ip6"
		}
	case len(v) == 6:
		return net.HardwareAddr(v).String()
	case len(v) == 4 || len(v) == 16:
		return net.IP(v).String()
	case (f == IPProto || f == L4Proto) && len(v) == 1 && v[0] == 17:
		return "udp"
	case f == ICMP6Type && len(v) == 1 && icmp6Names[v[0]] != "":
		return icmp6Names[v[0]]
	case f == L4Proto && len(v) == 1 && v[0] == 58:
		return "icmpv6"
	case len(v) == 2:
		return fmt.Sprint(int(v[0])<<8 | int(v[1]))
	}
	return fmt.Sprintf("%x", v)
}
