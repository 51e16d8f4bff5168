package podnat

import (
	"errors"
	"fmt"
	"net"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/pkg/network/nftable"
)

// ipsDstNAT is IPS_DST_NAT of <linux/netfilter/nf_conntrack_common.h>: the connection's
// destination was rewritten.
const ipsDstNAT = 1 << 5

// Install replaces the table in the current network namespace with the rules for c, in one
// netlink batch. It needs CAP_NET_ADMIN, which the runner has; the kernel needs nf_tables with
// NAT and conntrack (nft_chain_nat, nft_masq, nft_ct), as every Kubernetes node has for
// kube-proxy.
func Install(c Config) error {
	rules, err := Rules(c)
	if err != nil {
		return err
	}
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		if err := nftable.Delete(conn, fam, Table); err != nil {
			return err
		}
	}
	var four, six []Rule
	for _, r := range rules {
		if r.IPv6 {
			six = append(six, r)
		} else {
			four = append(four, r)
		}
	}
	if len(four) > 0 {
		addTable(conn, nftables.TableFamilyIPv4, four)
	}
	if len(six) > 0 {
		addTable(conn, nftables.TableFamilyIPv6, six)
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("install the guest's NAT (nftables table %s): %w (the kernel needs nf_tables with NAT and conntrack)", Table, err)
	}
	return nil
}

// addTable adds the table of one family with its chains and rules to conn's batch.
func addTable(conn *nftables.Conn, family nftables.TableFamily, rules []Rule) {
	t := conn.AddTable(&nftables.Table{Family: family, Name: Table})
	accept, drop := nftables.ChainPolicyAccept, nftables.ChainPolicyDrop
	chains := map[Chain]*nftables.Chain{
		Prerouting: {Name: string(Prerouting), Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPrerouting,
			Priority: nftables.ChainPriorityNATDest, Policy: &accept},
		// Policy drop too, in case a rule of ours is ever missing: the last rule drops anyway.
		Forward: {Name: string(Forward), Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookForward,
			Priority: nftables.ChainPriorityFilter, Policy: &drop},
		Postrouting: {Name: string(Postrouting), Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting,
			Priority: nftables.ChainPriorityNATSource, Policy: &accept},
	}
	for _, name := range Chains {
		ch := chains[name]
		ch.Table = t
		conn.AddChain(ch)
	}
	for _, r := range rules {
		conn.AddRule(&nftables.Rule{Table: t, Chain: chains[r.Chain], Exprs: exprs(r)})
	}
}

// Remove deletes the tables; they are gone with the pod's namespace anyway.
func Remove() error {
	return errors.Join(nftable.Remove(nftables.TableFamilyIPv4, Table), nftable.Remove(nftables.TableFamilyIPv6, Table))
}

func exprs(r Rule) []expr.Any {
	var out []expr.Any
	cmp := func(data []byte) *expr.Cmp { return &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data} }
	if r.IIf != "" {
		out = append(out, &expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}, cmp(ifname(r.IIf)))
	}
	if r.OIf != "" {
		out = append(out, &expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, cmp(ifname(r.OIf)))
	}
	// Addresses as the family's header holds them (RFC 791, RFC 8200).
	addr, saddrAt, daddrAt, natFamily := func(ip net.IP) []byte { return ip.To4() }, uint32(12), uint32(16), uint32(unix.NFPROTO_IPV4)
	if r.IPv6 {
		addr, saddrAt, daddrAt, natFamily = func(ip net.IP) []byte { return ip.To16() }, 8, 24, unix.NFPROTO_IPV6
	}
	if r.SAddr != nil {
		a := addr(r.SAddr)
		out = append(out, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: saddrAt, Len: uint32(len(a))}, cmp(a))
	}
	if r.DAddr != nil {
		a := addr(r.DAddr)
		out = append(out, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: daddrAt, Len: uint32(len(a))}, cmp(a))
	}
	if r.Proto != "" {
		proto := byte(unix.IPPROTO_TCP)
		if r.Proto == "udp" {
			proto = unix.IPPROTO_UDP
		}
		// The transport protocol past any IPv6 extension headers.
		out = append(out,
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, cmp([]byte{proto}),
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}, cmp(binaryutil.BigEndian.PutUint16(r.DPort)))
	}
	ctBits := func(key expr.CtKey, mask uint32) []expr.Any {
		zero := make([]byte, 4)
		return []expr.Any{
			&expr.Ct{Register: 1, Key: key},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: zero},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: zero},
		}
	}
	if r.CtEstablished {
		out = append(out, ctBits(expr.CtKeySTATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)...)
	}
	if r.CtDNAT {
		out = append(out, ctBits(expr.CtKeySTATUS, ipsDstNAT)...)
	}
	switch r.Action {
	case Accept:
		out = append(out, &expr.Verdict{Kind: expr.VerdictAccept})
	case Drop:
		out = append(out, &expr.Verdict{Kind: expr.VerdictDrop})
	case DNAT:
		out = append(out, &expr.Immediate{Register: 1, Data: addr(r.To)},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: natFamily, RegAddrMin: 1})
	case Masquerade:
		out = append(out, &expr.Masq{})
	}
	return out
}

// ifname is an interface name as the kernel compares it: NUL-padded to IFNAMSIZ.
func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}
