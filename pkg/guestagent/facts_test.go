package guestagent

import (
	"fmt"
	"strings"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

func TestCleanInterfaces(t *testing.T) {
	type addr = ipAddress
	many := make([]netIface, 40)
	for i := range many {
		many[i].Name = fmt.Sprintf("eth%02d", 39-i)
		for j := 0; j < 40; j++ {
			many[i].IPAddresses = append(many[i].IPAddresses, addr{"ipv4", fmt.Sprintf("10.0.%d.%d", i, j), 24})
		}
	}
	got := cleanInterfaces(many)
	if len(got) != MaxInterfaces || got[0].Name != "eth00" || len(got[0].IPs) != MaxIPs {
		t.Errorf("40 interfaces of 40 addresses: %d kept, first %s with %d", len(got), got[0].Name, len(got[0].IPs))
	}
	got = cleanInterfaces([]netIface{
		{Name: "lo", IPAddresses: []addr{{"ipv4", "127.0.0.1", 8}}},
		{Name: "eth0\x1b[31m", HardwareAddress: "52:54:00:00:00:01", IPAddresses: []addr{
			{"ipv4", "10.0.2.2", 24}, {"ipv6", "fe80::1", 64}, {"ipv4", "not-an-ip", 24}, {"ipv4", "10.0.0.1", 33}, {"ipv6", "::1", 128}}},
		{Name: "", IPAddresses: []addr{{"ipv4", "10.9.9.9", 8}}},
	})
	want := `[{eth0[31m 52:54:00:00:00:01 [10.0.2.2/24 fe80::1/64]}]`
	if fmt.Sprint(got) != want {
		t.Errorf("cleaned %v, want %s", got, want)
	}
}

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"  debian\n":             "debian",
		"a\x00b\x07c":            "abc",
		strings.Repeat("é", 100): strings.Repeat("é", 64),
		strings.Repeat("x", 200): strings.Repeat("x", maxText),
	} {
		if got := CleanText(in); got != want {
			t.Errorf("CleanText(%q) = %q, want %q", in, got, want)
		}
	}
	if cleanOS(osInfo{}) != nil {
		t.Error("an empty osinfo is not nil")
	}
}

// What a pod annotation says is cleaned as what the agent says: a hostile writer gets the same
// bounds.
func TestCleaned(t *testing.T) {
	f := Facts{Hostname: "h\x00ost", OS: &vmv1.GuestOSInfo{ID: strings.Repeat("d", 300)}}
	for i := range 100 {
		f.Interfaces = append(f.Interfaces, vmv1.GuestInterface{Name: fmt.Sprintf("eth%02d", i), IPs: []string{"10.0.0.1/24", "bad", "10.0.0.2/99", "fd00::2/64"}})
	}
	got := f.Cleaned()
	if got.Hostname != "host" || len(got.OS.ID) != maxText || len(got.Interfaces) != MaxInterfaces ||
		fmt.Sprint(got.Interfaces[0].IPs) != "[10.0.0.1/24 fd00::2/64]" {
		t.Errorf("cleaned %+v", got)
	}
	if (Facts{}).Cleaned().OS != nil {
		t.Error("no OS became one")
	}
}
