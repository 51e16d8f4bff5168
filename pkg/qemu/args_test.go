package qemu

import (
	"net"
	"slices"
	"strings"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"

	goldenfile "github.com/virtpod/virtpod/tests/golden"
)

func baseSpec() Spec {
	return Spec{
		Name:         "web-1",
		Acceleration: "kvm",
		GuestSize:    vmv1.GuestSize{CPUs: 2, MemoryMiB: 1024},

		Kernel:       "/virtpod/images/kernel/boot/vmlinuz",
		Initrd:       "/virtpod/images/kernel/boot/initrd.img",
		Cmdline:      "console=ttyS0 root=/dev/vda rw ip=10.0.0.5::10.0.0.1:255.255.255.0:web-1:eth0:off:10.96.0.10",
		DiskPath:     "/var/run/virtpod/root.qcow2",
		DiskFormat:   "qcow2",
		DiskCache:    CacheNone,
		TapFD:        3,
		MAC:          net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56},
		SerialSocket: "/var/run/virtpod/serial.sock",
		QMPSocket:    "/var/run/virtpod/qmp.sock",
		AgentSocket:  "/var/run/virtpod/qga.sock",
	}
}

// uefiSpec boots the root disk through OVMF, with the pod network.
func uefiSpec() Spec {
	s := baseSpec()
	s.Kernel, s.Initrd, s.Cmdline = "", "", ""
	s.Firmware, s.FirmwareCode, s.FirmwareVars = FirmwareUEFI, "/usr/share/OVMF/OVMF_CODE_4M.fd", "/var/run/virtpod/uefi-vars.fd"
	return s
}

// biosSpec boots the root disk through SeaBIOS, under TCG without a network.
func biosSpec() Spec {
	s := uefiSpec()
	s.Firmware, s.FirmwareCode, s.FirmwareVars = FirmwareBIOS, "/usr/share/seabios/bios-256k.bin", ""
	s.Acceleration, s.TapFD, s.MAC = "tcg", 0, nil
	return s
}

// golden compares argv, one argument a line, with testdata/<name>.golden.
func golden(t *testing.T, name string, args []string) {
	t.Helper()
	goldenfile.Check(t, name+".golden", []byte(strings.Join(args, "\n")+"\n"))
}

func TestGolden(t *testing.T) {
	tcg := baseSpec()
	tcg.Acceleration = "tcg"
	tcg.TapFD, tcg.MAC = 0, nil
	tcg.Initrd = ""
	tcg.DiskCache = CacheWriteback
	hostile := baseSpec()
	hostile.Name = "evil,id=x -drive file=/etc/shadow"
	hostile.Cmdline = "console=ttyS0 -drive file=/etc/shadow,if=virtio -append foo"
	hostile.DiskPath = "/var/run/vp,file=/etc/shadow/root.qcow2"
	hostile.SerialSocket = "/tmp/a,server=off/serial.sock"
	hostile.AgentSocket = "/tmp/a,name=com.redhat.spice.0/qga.sock"
	hostile.SeedPath = "/var/run/vp,read-only=off/cidata.iso"
	hostile.VNCSocket = "/var/run/vp,to=99,websocket=on/vnc.sock"
	seed := baseSpec()
	seed.SeedPath = "/var/run/virtpod/cidata.iso"
	hostileFirmware := uefiSpec()
	hostileFirmware.FirmwareCode = "/usr/share/OVMF/c,unit=1,read-only=off"
	hostileFirmware.FirmwareVars = "/var/run/vp,file.filename=/etc/shadow/uefi-vars.fd"
	hostileBIOS := biosSpec()
	hostileBIOS.FirmwareCode = "-drive file=/etc/shadow,if=pflash"
	incoming := tcg
	incoming.IncomingSocket = "/run/virtpod/control/migrate-in.sock"
	incoming.Machine = "pc-q35-7.2" // the source's pinned machine, on whatever QEMU the target has
	hostileIncoming := tcg
	hostileIncoming.IncomingSocket = "/run/vp,tcp:0:4444 -incoming exec:sh/migrate-in.sock"
	display := biosSpec() // a disk image's guest with its screen, as the controller starts it
	display.VNCSocket = "/var/run/virtpod/vnc.sock"
	for name, s := range map[string]Spec{
		"kvm-pod-network": baseSpec(), "tcg-no-network": tcg, "hostile-strings": hostile, "cloud-init-seed": seed,
		"uefi-disk-boot": uefiSpec(), "bios-disk-boot": biosSpec(), "hostile-firmware-uefi": hostileFirmware, "hostile-firmware-bios": hostileBIOS,
		"incoming-migration": incoming, "hostile-incoming": hostileIncoming, "display-vnc": display,
	} {
		t.Run(name, func(t *testing.T) {
			args, err := Args(s)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, args)
		})
	}
}

// TestAccelerationIsExplicit: kvm gives -accel kvm only and tcg gives -accel tcg only; no argv
// ever lists both, which is how QEMU would silently fall back.
func TestAccelerationIsExplicit(t *testing.T) {
	for _, accel := range []string{"kvm", "tcg"} {
		s := baseSpec()
		s.Acceleration = accel
		args, err := Args(s)
		if err != nil {
			t.Fatal(err)
		}
		var accels []string
		for i, a := range args {
			if a == "-accel" || a == "-enable-kvm" || a == "-machine" && strings.Contains(args[i+1], "accel") {
				// The accelerator is the option list's first item (tcg also bounds its cache).
				name, _, _ := strings.Cut(args[min(i+1, len(args)-1)], ",")
				accels = append(accels, name)
			}
		}
		if !slices.Equal(accels, []string{accel}) {
			t.Errorf("acceleration %s: argv accelerators %q, want exactly [%s]", accel, accels, accel)
		}
	}
}

// TestTCGCacheIsBounded: an emulated guest's translation cache is bounded (an eighth of the
// guest, 32 to 128 MiB), so QEMU stays within the memory podspec gives the pod; KVM has none.
func TestTCGCacheIsBounded(t *testing.T) {
	cases := []struct {
		accel    string
		guestMiB int64
		want     string
	}{
		{"tcg", 128, "tcg,tb-size=32"},
		{"tcg", 256, "tcg,tb-size=32"},
		{"tcg", 512, "tcg,tb-size=64"},
		{"tcg", 1024, "tcg,tb-size=128"},
		{"tcg", 16384, "tcg,tb-size=128"},
		{"kvm", 1024, "kvm"},
	}
	for _, c := range cases {
		s := baseSpec()
		s.Acceleration, s.MemoryMiB = c.accel, c.guestMiB
		args, err := Args(s)
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.Index(args, "-accel"); i < 0 || args[i+1] != c.want {
			t.Errorf("%s, %d MiB: -accel %v, want %s", c.accel, c.guestMiB, args, c.want)
		}
	}
}

// TestUserStringsCannotInject checks the property behind the hostile golden file directly: each
// user string lands inside exactly one argv element, and inside an option list its commas are
// doubled so QEMU cannot read a new option from it.
func TestUserStringsCannotInject(t *testing.T) {
	s := baseSpec()
	s.Name = "a,b=c"
	s.Cmdline = "x -drive file=/etc/shadow"
	s.DiskPath = "/d,format=raw,file=/etc/shadow"
	args, err := Args(s)
	if err != nil {
		t.Fatal(err)
	}
	count := func(flag string) (n int) {
		for _, a := range args {
			if a == flag {
				n++
			}
		}
		return n
	}
	if count("-drive") != 1 || count("-append") != 1 || count("-name") != 1 {
		t.Fatalf("user strings added arguments: %q", args)
	}
	idx := slices.Index(args, "-append")
	if args[idx+1] != s.Cmdline {
		t.Errorf("-append %q, want the command line verbatim", args[idx+1])
	}
	if got := args[slices.Index(args, "-name")+1]; got != "guest=a,,b=c" {
		t.Errorf("-name %q, want the comma doubled", got)
	}
	drive := args[slices.Index(args, "-drive")+1]
	if !strings.Contains(drive, "file.filename=/d,,format=raw,,file=/etc/shadow,cache=") {
		t.Errorf("-drive %q: path commas not doubled", drive)
	}
}

func TestRejects(t *testing.T) {
	for name, mutate := range map[string]func(*Spec){
		"unsafe cache":         func(s *Spec) { s.DiskCache = "unsafe" },
		"unknown accel":        func(s *Spec) { s.Acceleration = "hvf" },
		"newline cmdline":      func(s *Spec) { s.Cmdline = "a\n-b" },
		"tap without MAC":      func(s *Spec) { s.MAC = nil },
		"missing kernel":       func(s *Spec) { s.Kernel = "" },
		"unknown format":       func(s *Spec) { s.DiskFormat = "vmdk" },
		"too little memory":    func(s *Spec) { s.MemoryMiB = 8 },
		"newline seed path":    func(s *Spec) { s.SeedPath = "/s\n-drive" },
		"kernel and firmware":  func(s *Spec) { s.Firmware, s.FirmwareCode = FirmwareBIOS, "/bios.bin" },
		"relative incoming":    func(s *Spec) { s.IncomingSocket = "tcp:0:4444" },
		"incoming too long":    func(s *Spec) { s.IncomingSocket = "/" + strings.Repeat("a", 107) },
		"newline incoming":     func(s *Spec) { s.IncomingSocket = "/m\n-S" },
		"machine with options": func(s *Spec) { s.Machine = "pc-q35-7.2,accel=kvm" },
		"not a q35 machine":    func(s *Spec) { s.Machine = "microvm" },
		"relative VNC socket":  func(s *Spec) { s.VNCSocket = "vnc.sock" },
		"VNC socket too long":  func(s *Spec) { s.VNCSocket = "/" + strings.Repeat("a", 107) },
	} {
		s := baseSpec()
		mutate(&s)
		if _, err := Args(s); err == nil {
			t.Errorf("%s: Args accepted it", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestFirmwareRejects: a firmware boot needs a known firmware with its files, and takes nothing a
// kernel boot would.
func TestFirmwareRejects(t *testing.T) {
	for name, mutate := range map[string]func(*Spec){
		"no firmware":            func(s *Spec) { s.Firmware = "" },
		"unknown firmware":       func(s *Spec) { s.Firmware = "coreboot" },
		"uefi without vars":      func(s *Spec) { s.FirmwareVars = "" },
		"bios with vars":         func(s *Spec) { s.Firmware = FirmwareBIOS },
		"no firmware code":       func(s *Spec) { s.FirmwareCode = "" },
		"initrd without kernel":  func(s *Spec) { s.Initrd = "/i" },
		"cmdline without kernel": func(s *Spec) { s.Cmdline = "console=ttyS0" },
		"newline in vars path":   func(s *Spec) { s.FirmwareVars = "/v\n-S" },
		"NUL in code path":       func(s *Spec) { s.FirmwareCode = "/c\x00" },
	} {
		s := uefiSpec()
		mutate(&s)
		if _, err := Args(s); err == nil {
			t.Errorf("%s: Args accepted it", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestFirmwareBootsOnlyTheDisk: without a kernel there is no -kernel, -initrd or -append, the
// root disk is the first and only boot device, and OVMF's code is mapped read-only while its
// variable store is writable.
func TestFirmwareBootsOnlyTheDisk(t *testing.T) {
	for _, s := range []Spec{uefiSpec(), biosSpec()} {
		args, err := Args(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []string{"-kernel", "-initrd", "-append"} {
			if slices.Contains(args, a) {
				t.Errorf("%s boot has %s", s.Firmware, a)
			}
		}
		if !slices.Contains(args, "virtio-blk-pci,drive=root,bootindex=0") || !slices.Contains(args, "strict=on") {
			t.Errorf("%s boot: the root disk is not the strict boot device: %q", s.Firmware, args)
		}
		var pflash []string
		for _, a := range args {
			if strings.HasPrefix(a, "if=pflash") {
				pflash = append(pflash, a)
			}
		}
		switch s.Firmware {
		case FirmwareBIOS:
			if len(pflash) != 0 || args[slices.Index(args, "-bios")+1] != s.FirmwareCode {
				t.Errorf("bios boot: pflash %q, -bios not %s", pflash, s.FirmwareCode)
			}
		case FirmwareUEFI:
			if len(pflash) != 2 || !strings.Contains(pflash[0], "unit=0") || !strings.Contains(pflash[0], "read-only=on") ||
				!strings.HasSuffix(pflash[0], "="+s.FirmwareCode) || strings.Contains(pflash[1], "read-only") || !strings.HasSuffix(pflash[1], "="+s.FirmwareVars) {
				t.Errorf("uefi boot: pflash drives %q", pflash)
			}
		}
	}
}

// TestControlOnlyOnUnixSockets: QMP and the serial console are unix sockets the runner names, and
// nothing else reaches the hypervisor: no monitor, no VNC/SPICE display, no gdb stub, no TCP,
// UDP or telnet character device, whatever the spec.
func TestControlOnlyOnUnixSockets(t *testing.T) {
	tcg := baseSpec()
	tcg.Acceleration, tcg.TapFD, tcg.MAC = "tcg", 0, nil
	incoming := tcg
	incoming.IncomingSocket = "/run/virtpod/control/migrate-in.sock"
	for _, s := range []Spec{baseSpec(), tcg, incoming} {
		args, err := Args(s)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range args {
			switch a {
			case "-monitor", "-vnc", "-spice", "-gdb", "-s", "-incoming", "-display":
				if a == "-incoming" && i+1 < len(args) && args[i+1] == "defer" && s.IncomingSocket != "" {
					continue
				}
				if a == "-display" && i+1 < len(args) && args[i+1] == "none" {
					continue
				}
				t.Errorf("argv has %s %s", a, args[i+1])
			case "-qmp", "-serial":
				t.Errorf("argv has %s %s: control channels go through -chardev socket", a, args[i+1])
			case "-chardev":
				if !strings.HasPrefix(args[i+1], "socket,") || !strings.Contains(args[i+1], ",path=") || strings.Contains(args[i+1], "host=") {
					t.Errorf("-chardev %s is not a unix socket", args[i+1])
				}
			}
			for _, bad := range []string{"tcp:", "udp:", "telnet", "websocket"} {
				if strings.Contains(a, bad) {
					t.Errorf("argument %q reaches the network (%s)", a, bad)
				}
			}
		}
		if !slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "path="+s.QMPSocket) }) ||
			!slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "path="+s.SerialSocket) }) {
			t.Errorf("QMP or console socket missing from %q", args)
		}
	}
}

// TestIncomingIsOneUnixSocket: a migration target's argv differs from the same guest's boot only
// by -incoming defer, before -S (it stays paused once the guest arrived), and by its boot RAM
// made up front under the name -m gives it: it listens when told, on "unix:" and the path
// verbatim, a hostile path staying the path.
func TestIncomingIsOneUnixSocket(t *testing.T) {
	boot := baseSpec()
	bootArgs, err := Args(boot)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/run/virtpod/control/migrate-in.sock", "/x,tcp:0:1 -incoming exec:sh -S"} {
		target := boot
		target.IncomingSocket = path
		args, err := Args(target)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for i, a := range bootArgs[:len(bootArgs)-1] {
			if i > 0 && bootArgs[i-1] == "-machine" {
				a += ",memory-backend=pc.ram"
			}
			want = append(want, a)
			if i > 0 && bootArgs[i-1] == "-m" {
				want = append(want, "-object", "memory-backend-ram,id=pc.ram,size=1024M,prealloc=on,prealloc-threads=2,x-use-canonical-path-for-ramblock-id=off")
			}
		}
		want = append(want, "-incoming", "defer", "-S")
		if !slices.Equal(args, want) {
			t.Errorf("incoming %q:\n got %q\nwant %q", path, args, want)
		}
		if uri := target.IncomingURI(); uri != "unix:"+path {
			t.Errorf("incoming %q: URI %q", path, uri)
		}
	}
}
