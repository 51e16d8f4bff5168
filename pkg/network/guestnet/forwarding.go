package guestnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// ipv4DevconfForwarding is IPV4_DEVCONF_FORWARDING of <linux/ip.h>, the index of an interface's
// forwarding flag in its IFLA_INET_CONF array (counted from 1).
const ipv4DevconfForwarding = 1

// SetForwarding turns IPv4 forwarding on for one interface through rtnetlink (RTM_SETLINK with
// IFLA_AF_SPEC → AF_INET → IFLA_INET_CONF → IPV4_DEVCONF_FORWARDING), the same flag as
// /proc/sys/net/ipv4/conf/<if>/forwarding. A container runtime mounts /proc/sys read-only and
// net.ipv4.ip_forward is not a safe sysctl a pod may set, but CAP_NET_ADMIN in the pod's
// namespace is enough for netlink. The kernel forwards a packet when the interface it came IN on
// has the flag, so the interfaces that receive traffic to pass on need it, nothing else.
func SetForwarding(link netlink.Link, on bool) error {
	a := link.Attrs()
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(a.Index)
	req.AddData(msg)
	v := uint32(0)
	if on {
		v = 1
	}
	flag := nl.NewRtAttr(ipv4DevconfForwarding, nl.Uint32Attr(v))
	conf := nl.NewRtAttr(unix.IFLA_INET_CONF, flag.Serialize())
	inet := nl.NewRtAttr(unix.AF_INET, conf.Serialize())
	req.AddData(nl.NewRtAttr(unix.IFLA_AF_SPEC, inet.Serialize()))
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("IPv4 forwarding on %s through netlink: %w (the runner needs CAP_NET_ADMIN)", a.Name, err)
	}
	got, err := Forwarding(link)
	if err != nil {
		return err
	}
	if got != on {
		return fmt.Errorf("IPv4 forwarding on %s: the kernel accepted the change but still reports %v", a.Name, got)
	}
	return nil
}

// Forwarding reads an interface's IPv4 forwarding flag from RTM_GETLINK's IFLA_INET_CONF.
func Forwarding(link netlink.Link) (bool, error) {
	a := link.Attrs()
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(a.Index)
	req.AddData(msg)
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", a.Name, err)
	}
	for _, m := range msgs {
		if len(m) < unix.SizeofIfInfomsg || nl.DeserializeIfInfomsg(m).Index != int32(a.Index) {
			continue
		}
		conf, err := inetConf(m[unix.SizeofIfInfomsg:])
		if err != nil {
			return false, fmt.Errorf("read %s: %w", a.Name, err)
		}
		if len(conf) < 4*ipv4DevconfForwarding {
			return false, fmt.Errorf("read %s: its IPv4 configuration has %d bytes, no forwarding flag", a.Name, len(conf))
		}
		return binary.NativeEndian.Uint32(conf[4*(ipv4DevconfForwarding-1):]) != 0, nil
	}
	return false, fmt.Errorf("read %s: no answer for index %d", a.Name, a.Index)
}

// inetConf finds IFLA_AF_SPEC → AF_INET → IFLA_INET_CONF among a link message's attributes.
func inetConf(b []byte) ([]byte, error) {
	path := []uint16{unix.IFLA_AF_SPEC, unix.AF_INET, unix.IFLA_INET_CONF}
	for _, want := range path {
		attrs, err := nl.ParseRouteAttr(b)
		if err != nil {
			return nil, err
		}
		b = nil
		for _, at := range attrs {
			if at.Attr.Type&^(unix.NLA_F_NESTED|unix.NLA_F_NET_BYTEORDER) == want {
				b = at.Value
				break
			}
		}
		if b == nil {
			return nil, errors.New("no IPv4 configuration (IFLA_INET_CONF) in the link's attributes")
		}
	}
	return b, nil
}

// SetForwarding6 turns IPv6 forwarding on in the current network namespace and keeps router
// advertisements accepted on the pod interface podIf. Unlike IPv4's, the kernel forwards IPv6
// only when the namespace-wide flag (all) is on, and rtnetlink cannot set it: it is written
// through /proc/sys, which shows the namespace of the thread that opens it. A container sees
// /proc/sys read-only; the node agent, which alone calls this, makes it writable in its own
// mount namespace the first time (it holds CAP_SYS_ADMIN to join pods' namespaces already).
func SetForwarding6(podIf string) error {
	if err := writeSysctl("/proc/sys/net/ipv6/conf/all/forwarding", "1"); err != nil {
		return fmt.Errorf("IPv6 forwarding for the masquerade network: %w", err)
	}
	// A forwarding namespace ignores router advertisements unless told (2) to take them: the
	// pod network may route the pod by them.
	if err := writeSysctl("/proc/sys/net/ipv6/conf/"+podIf+"/accept_ra", "2"); err != nil {
		return fmt.Errorf("router advertisements on %s: %w", podIf, err)
	}
	return nil
}

var procSysWritable sync.Once

func writeSysctl(path, value string) error {
	err := os.WriteFile(path, []byte(value), 0o644)
	if errors.Is(err, unix.EROFS) {
		procSysWritable.Do(func() {
			_ = unix.Mount("", "/proc/sys", "", unix.MS_REMOUNT|unix.MS_BIND, "")
		})
		err = os.WriteFile(path, []byte(value), 0o644)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w (the node agent needs CAP_SYS_ADMIN to make /proc/sys writable in its own mount namespace)", path, err)
	}
	return nil
}
