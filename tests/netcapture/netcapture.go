// Package netcapture reads the frames that cross a network interface, for tests that must see
// what reached a link (or that nothing did): a raw packet socket, no tcpdump.
package netcapture

import (
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Open binds a packet socket to the interface ifName of the calling thread's network namespace:
// it receives every frame the interface sends or receives from now on. Close it with unix.Close.
func Open(ifName string) (int, error) {
	l, err := netlink.LinkByName(ifName)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: l.Attrs().Index}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// Read returns the frames fd receives within wait.
func Read(fd int, wait time.Duration) [][]byte {
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	var out [][]byte
	for end := time.Now().Add(wait); time.Now().Before(end); {
		buf := make([]byte, 65536)
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == nil && n > 0 {
			out = append(out, buf[:n])
		}
	}
	return out
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
