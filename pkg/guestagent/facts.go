package guestagent

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Facts is what the agent says of the guest, cleaned: the node agent writes it into the pod and
// the controller into the VM's status, so it is bounded in size and holds printable text only.
type Facts struct {
	OS         *vmv1.GuestOSInfo
	Hostname   string
	Interfaces []vmv1.GuestInterface
	Bootstrap  *vmv1.GuestBootstrap
}

// Limits on what a guest may put into the API.
const (
	MaxInterfaces = 16
	MaxIPs        = 16
	maxText       = 128
)

type osInfo struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	PrettyName    string `json:"pretty-name"`
	Version       string `json:"version"`
	VersionID     string `json:"version-id"`
	KernelRelease string `json:"kernel-release"`
}

type hostName struct {
	HostName string `json:"host-name"`
}

type netIface struct {
	Name            string      `json:"name"`
	HardwareAddress string      `json:"hardware-address"`
	IPAddresses     []ipAddress `json:"ip-addresses"`
}

type ipAddress struct {
	Type    string `json:"ip-address-type"`
	Address string `json:"ip-address"`
	Prefix  int    `json:"prefix"`
}

// Facts asks the agent for the OS, the hostname, the interfaces and the bootstrap's files. A
// command the guest's agent
// does not offer (an older agent, one with RPCs blocked) leaves its part empty; a channel that
// fails fails the whole.
func (c *Client) Facts(ctx context.Context) (Facts, error) {
	var f Facts
	var os osInfo
	switch err := c.Call(ctx, "guest-get-osinfo", nil, &os); {
	case err == nil:
		f.OS = cleanOS(os)
	case !refused(err):
		return Facts{}, err
	}
	var h hostName
	switch err := c.Call(ctx, "guest-get-host-name", nil, &h); {
	case err == nil:
		f.Hostname = CleanText(h.HostName)
	case !refused(err):
		return Facts{}, err
	}
	var ifs []netIface
	switch err := c.Call(ctx, "guest-network-get-interfaces", nil, &ifs); {
	case err == nil:
		f.Interfaces = cleanInterfaces(ifs)
	case !refused(err):
		return Facts{}, err
	}
	b, err := c.Bootstrap(ctx, DefaultBootstrapFiles)
	if err != nil {
		return Facts{}, err
	}
	f.Bootstrap = b
	return f, nil
}

func refused(err error) bool {
	var ae *AgentError
	return errors.As(err, &ae)
}

func cleanOS(o osInfo) *vmv1.GuestOSInfo {
	out := &vmv1.GuestOSInfo{ID: CleanText(o.ID), Name: CleanText(o.Name), PrettyName: CleanText(o.PrettyName), Version: CleanText(o.Version),
		VersionID: CleanText(o.VersionID), KernelRelease: CleanText(o.KernelRelease)}
	if *out == (vmv1.GuestOSInfo{}) {
		return nil
	}
	return out
}

// cleanInterfaces keeps up to MaxInterfaces interfaces but loopback, each with up to MaxIPs
// valid addresses, sorted by name so an unchanged guest gives equal facts.
func cleanInterfaces(in []netIface) []vmv1.GuestInterface {
	var out []vmv1.GuestInterface
	for _, i := range in {
		if i.Name == "lo" {
			continue
		}
		itf := vmv1.GuestInterface{Name: CleanText(i.Name), MAC: CleanText(i.HardwareAddress)}
		for _, a := range i.IPAddresses {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil || ip.IsLoopback() || a.Prefix < 0 || a.Prefix > ip.BitLen() {
				continue
			}
			itf.IPs = append(itf.IPs, netip.PrefixFrom(ip, a.Prefix).String())
			if len(itf.IPs) == MaxIPs {
				break
			}
		}
		if itf.Name == "" {
			continue
		}
		out = append(out, itf)
	}
	slices.SortFunc(out, func(a, b vmv1.GuestInterface) int { return strings.Compare(a.Name, b.Name) })
	if len(out) > MaxInterfaces {
		out = out[:MaxInterfaces]
	}
	return out
}

// CleanText keeps the printable characters of s, trimmed, at most maxText bytes of them.
func CleanText(s string) string { return cleanBounded(s, maxText) }

// cleanBounded keeps the printable characters of s, trimmed, at most max bytes of them.
func cleanBounded(s string, maxText int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, s)
	s = strings.TrimSpace(s)
	for len(s) > maxText {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	return s
}

// Cleaned bounds and cleans facts that came from elsewhere (a pod annotation anyone who may
// patch the pod can write) as Facts does what the agent said.
func (f Facts) Cleaned() Facts {
	out := Facts{Hostname: CleanText(f.Hostname)}
	if f.OS != nil {
		out.OS = cleanOS(osInfo{ID: f.OS.ID, Name: f.OS.Name, PrettyName: f.OS.PrettyName, Version: f.OS.Version,
			VersionID: f.OS.VersionID, KernelRelease: f.OS.KernelRelease})
	}
	in := make([]netIface, 0, min(len(f.Interfaces), 4*MaxInterfaces))
	for _, i := range f.Interfaces[:min(len(f.Interfaces), 4*MaxInterfaces)] {
		n := netIface{Name: i.Name, HardwareAddress: i.MAC}
		for _, ip := range i.IPs[:min(len(i.IPs), 4*MaxIPs)] {
			p, err := netip.ParsePrefix(ip)
			if err != nil {
				continue
			}
			n.IPAddresses = append(n.IPAddresses, ipAddress{Address: p.Addr().String(), Prefix: p.Bits()})
		}
		in = append(in, n)
	}
	out.Interfaces = cleanInterfaces(in)
	if b := f.Bootstrap; b != nil {
		out.Bootstrap = &vmv1.GuestBootstrap{Sentinel: b.Sentinel, CloudInitDone: b.CloudInitDone}
		for _, e := range b.CloudInitErrors[:min(len(b.CloudInitErrors), maxErrors)] {
			out.Bootstrap.CloudInitErrors = append(out.Bootstrap.CloudInitErrors, cleanBounded(e, maxErrorText))
		}
	}
	return out
}
