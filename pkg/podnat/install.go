package podnat

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/pkg/nftable"
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
	if err := nftable.Delete(conn, nftables.TableFamilyIPv4, Table); err != nil {
		return err
	}
	t := conn.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: Table})
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
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("install the guest's NAT (nftables table ip %s): %w (the kernel needs nf_tables with NAT and conntrack)", Table, err)
	}
	return nil
}

// Remove deletes the table; it is gone with the pod's namespace anyway.
func Remove() error { return nftable.Remove(nftables.TableFamilyIPv4, Table) }

func exprs(r Rule) []expr.Any {
	var out []expr.Any
	cmp := func(data []byte) *expr.Cmp { return &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data} }
	if r.IIf != "" {
		out = append(out, &expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}, cmp(ifname(r.IIf)))
	}
	if r.OIf != "" {
		out = append(out, &expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, cmp(ifname(r.OIf)))
	}
	if r.SAddr != nil {
		out = append(out, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}, cmp(r.SAddr.To4()))
	}
	if r.DAddr != nil {
		out = append(out, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}, cmp(r.DAddr.To4()))
	}
	if r.Proto != "" {
		proto := byte(unix.IPPROTO_TCP)
		if r.Proto == "udp" {
			proto = unix.IPPROTO_UDP
		}
		out = append(out,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 9, Len: 1}, cmp([]byte{proto}),
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
		out = append(out, &expr.Immediate{Register: 1, Data: r.To.To4()},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1})
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
