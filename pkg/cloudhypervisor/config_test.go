package cloudhypervisor

import (
	"encoding/json"
	"net"
	"strings"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"

	goldenfile "github.com/virtpod/virtpod/tests/golden"
)

func baseSpec() Spec {
	return Spec{
		GuestSize:    vmv1.GuestSize{CPUs: 2, MemoryMiB: 1024},
		Kernel:       "/virtpod/images/kernel/boot/vmlinuz",
		Initrd:       "/virtpod/images/kernel/boot/initrd.img",
		Cmdline:      "console=ttyS0 root=/dev/vda rw ip=10.0.0.5::10.0.0.1:255.255.255.0:web-1:eth0:off",
		DiskPath:     "/var/run/virtpod/root.qcow2",
		DiskFormat:   "qcow2",
		DirectIO:     true,
		TapName:      "vp-tap0",
		MAC:          net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56},
		MTU:          1450,
		SerialSocket: "/var/run/virtpod/serial.sock",
	}
}

func golden(t *testing.T, name string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	goldenfile.Check(t, name+".golden", append(b, '\n'))
}

func TestGolden(t *testing.T) {
	noNet := baseSpec()
	noNet.TapName, noNet.MAC, noNet.Initrd, noNet.DiskFormat, noNet.DirectIO = "", nil, "", "raw", false
	hostile := baseSpec()
	hostile.Cmdline = `console=ttyS0 "},"disks":[{"path":"/etc/shadow"}],"x":{"`
	seed := baseSpec()
	seed.SeedPath = "/var/run/virtpod/cidata.iso"
	firmware := baseSpec()
	firmware.Kernel, firmware.Initrd, firmware.Cmdline = "", "", ""
	firmware.Firmware = "/usr/share/cloud-hypervisor/CLOUDHV.fd"
	hostileFirmware := firmware
	hostileFirmware.Firmware = `/fw","kernel":"/etc/shadow`
	for name, s := range map[string]Spec{
		"pod-network": baseSpec(), "no-network-raw": noNet, "hostile-cmdline": hostile, "cloud-init-seed": seed,
		"firmware-boot": firmware, "hostile-firmware": hostileFirmware,
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Build(s)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, c)
		})
	}
}

// TestCmdlineStaysAString: a command line that looks like JSON cannot add a disk.
func TestCmdlineStaysAString(t *testing.T) {
	s := baseSpec()
	s.Cmdline = `x"},"disks":[{"path":"/etc/shadow"}]`
	c, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(c)
	var back VMConfig
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Disks) != 1 || back.Payload.Cmdline != s.Cmdline {
		t.Fatalf("round trip changed the config: %s", b)
	}
}

func TestBuildRejects(t *testing.T) {
	for name, mutate := range map[string]func(*Spec){
		"format":                  func(s *Spec) { s.DiskFormat = "vmdk" },
		"mac":                     func(s *Spec) { s.MAC = nil },
		"newline":                 func(s *Spec) { s.Cmdline = "a\nb" },
		"cpus":                    func(s *Spec) { s.CPUs = 0 },
		"kernel and firmware":     func(s *Spec) { s.Firmware = "/fw" },
		"neither":                 func(s *Spec) { s.Kernel = "" },
		"initrd without a kernel": func(s *Spec) { s.Kernel, s.Cmdline, s.Firmware = "", "", "/fw" },
		"firmware not UTF-8":      func(s *Spec) { s.Kernel, s.Initrd, s.Cmdline, s.Firmware = "", "", "", "/fw\xff" },
	} {
		s := baseSpec()
		mutate(&s)
		if _, err := Build(s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestArgs(t *testing.T) {
	if got := strings.Join(Args("/run/ch.sock"), " "); got != "--api-socket /run/ch.sock" {
		t.Fatalf("Args = %q", got)
	}
}
