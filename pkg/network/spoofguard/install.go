package spoofguard

import (
	"fmt"
	"net"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/pkg/network/nftable"
)

// Table is the nftables table (netdev family) that holds the guard in the pod's namespace.
const Table = "virtpod-guard"

const chainName = "guest-ingress"

// Install adds the guard to the tap in the current network namespace, replacing an earlier
// one (an agent plumbing the pod again), with relay's rule before it when relay is not nil;
// ip6 is the guest's IPv6 address in a dual-stack pod (else nil); bridge is the bridge's MAC,
// to which the guest's DHCP is turned. It needs CAP_NET_ADMIN in the namespace: the node agent's.
func Install(tap string, mac net.HardwareAddr, ip, ip6 net.IP, bridge net.HardwareAddr, relay *Relay) error {
	rules, err := Rules(mac, ip, ip6, bridge)
	if err != nil {
		return err
	}
	if relay != nil {
		rr, err := RelayRules(*relay)
		if err != nil {
			return err
		}
		rules = append(rr, rules...)
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	if err := nftable.Delete(c, nftables.TableFamilyNetdev, Table); err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyNetdev, Name: Table})
	for _, name := range Counters {
		c.AddObj(&nftables.CounterObj{Table: t, Name: name})
	}
	accept := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{
		Name: chainName, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookIngress, Priority: nftables.ChainPriorityFilter,
		Device: tap, Policy: &accept,
	})
	for _, r := range rules {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs(r)})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("install the anti-spoofing filter on %s: %w (the kernel needs nf_tables with the netdev family)", tap, err)
	}
	return nil
}

// Remove deletes the guard; it is gone with the pod's namespace anyway.
func Remove() error { return nftable.Remove(nftables.TableFamilyNetdev, Table) }

// Dropped reads the drop counters: frames per counter name since Install.
func Dropped() (map[string]uint64, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	objs, err := c.GetObjects(&nftables.Table{Family: nftables.TableFamilyNetdev, Name: Table})
	if err != nil {
		return nil, fmt.Errorf("read the anti-spoofing counters: %w", err)
	}
	out := make(map[string]uint64, len(Counters))
	for _, o := range objs {
		if co, ok := o.(*nftables.CounterObj); ok {
			out[co.Name] = co.Packets
		}
	}
	return out, nil
}

func exprs(r Rule) []expr.Any {
	var out []expr.Any
	for _, m := range r.Matches {
		op := expr.CmpOpNeq
		if m.Equal {
			op = expr.CmpOpEq
		}
		if m.Field.Base == Meta {
			out = append(out, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1})
		} else {
			out = append(out, &expr.Payload{DestRegister: 1, Base: payloadBase(m.Field.Base), Offset: m.Field.Offset, Len: m.Field.Len})
		}
		out = append(out, &expr.Cmp{Op: op, Register: 1, Data: m.Value})
	}
	if r.Counter != "" {
		out = append(out, &expr.Objref{Type: unix.NFT_OBJECT_COUNTER, Name: r.Counter})
	}
	if s := r.Set; s != nil {
		// A link-layer field carries no checksum; nothing else is ever set.
		out = append(out,
			&expr.Immediate{Register: 1, Data: s.Value},
			&expr.Payload{OperationType: expr.PayloadWrite, SourceRegister: 1, Base: payloadBase(s.Field.Base),
				Offset: s.Field.Offset, Len: s.Field.Len, CsumType: expr.CsumTypeNone})
	}
	switch r.Verdict {
	case Accept:
		return append(out, &expr.Verdict{Kind: expr.VerdictAccept})
	case Drop:
		return append(out, &expr.Verdict{Kind: expr.VerdictDrop})
	}
	return out
}

func payloadBase(b Base) expr.PayloadBase {
	switch b {
	case Network:
		return expr.PayloadBaseNetworkHeader
	case Transport:
		return expr.PayloadBaseTransportHeader
	default:
		return expr.PayloadBaseLLHeader
	}
}
