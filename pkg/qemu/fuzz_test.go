package qemu_test

import (
	"net"
	"strings"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/qemu"
)

// Placeholders stand in for the user strings in a reference argv built from the same spec.
const (
	phName, phCPU, phKernel, phInitrd = "NAME", "MODEL", "/KERNEL", "/INITRD"
	phCmdline, phDisk, phSeed         = "CMDLINE", "/DISK", "/SEED"
	phSerial, phQMP                   = "/SERIAL", "/QMP"
	phCode, phVars                    = "/CODE", "/VARS"
	phIncoming, phVNC                 = "/INCOMING", "/VNC"
)

// How QEMU reads the value of each option a user string may reach: verbatim, or as an option
// list with this implied first key. -cpu is neither: QEMU splits it at its first comma into
// model and features, with no escape.
var (
	verbatim    = map[string]bool{"-kernel": true, "-initrd": true, "-append": true, "-bios": true, "-incoming": true}
	optionLists = map[string]string{"-name": "guest", "-drive": "", "-chardev": "backend", "-vnc": "vnc"}
)

// FuzzArgs: whatever the strings in a Spec, the argv has the shape of the same spec with
// harmless strings — the same options at the same places, so no string becomes an option of
// its own — the kernel command line is the one argument after -append, and each string in an
// option list parses back (QEMU's syntax, ",," a literal comma) to exactly itself under the
// same keys, with no key added. Without a kernel the same holds for the firmware's paths.
func FuzzArgs(f *testing.F) {
	mac := []byte{0x52, 0x54, 0, 0x12, 0x34, 0x56}
	f.Add("web-1", "", "/virtpod/images/kernel/boot/vmlinuz", "/virtpod/images/kernel/boot/initrd.img", "console=ttyS0 root=/dev/vda rw",
		"/var/run/virtpod/root.qcow2", "/var/run/virtpod/cidata.img", "/var/run/virtpod/serial.sock", "/var/run/virtpod/qmp.sock", int32(2), int64(1024), false, false, false, 3, mac, "", "", "")
	f.Add("evil,id=x -drive file=/etc/shadow", "", "/k", "", "console=ttyS0 -drive file=/etc/shadow,if=virtio -append foo",
		"/var/run/vp,file=/etc/shadow/root.qcow2", "/c,read-only=off", "/tmp/a,server=off/serial.sock", "/q,,", int32(1), int64(16), true, true, true, 0, []byte(nil), "", "", "")
	f.Add(",", "qemu64", "-S", "-kernel", "-S", ",,", ",,,", "x,", ",path=/etc/passwd", int32(255), int64(65536), true, false, true, 4, mac, "", "", "")
	f.Add("a", "host,+vmx", "/k", "/i", "", "/d", "", "/s", "/q", int32(1), int64(64), false, true, false, 0, []byte(nil), "", "", "")
	f.Add("web-1", "", "", "", "", "/var/run/virtpod/root.qcow2", "", "/var/run/virtpod/serial.sock", "/var/run/virtpod/qmp.sock",
		int32(1), int64(512), true, false, false, 3, mac, "uefi", "/usr/share/OVMF/OVMF_CODE_4M.fd", "/var/run/virtpod/uefi-vars.fd")
	f.Add("web-1", "", "", "", "", "/d", "", "/s", "/q", int32(1), int64(512), true, true, false, 0, []byte(nil), "bios", "-S", "")
	f.Add("x", "", "", "", "", "/d", "", "/s", "/q", int32(1), int64(512), false, false, false, 0, []byte(nil), "uefi",
		"/c,unit=1,read-only=off", "/v,file.filename=/etc/shadow")
	// A migration target (a negative tap fd, see below), with a plain and a hostile socket path.
	f.Add("web-1", "", "/k", "", "", "/d", "", "/s", "/run/virtpod/control/qmp.sock", int32(1), int64(256), true, false, true, -1, []byte(nil), "", "", "")
	f.Add("x", "", "/k", "", "", "/d", "", "/s", "/c,tcp:0:1 -incoming exec:sh", int32(1), int64(256), true, false, true, -1, []byte(nil), "", "", "")
	f.Add("x", "", "/k", "", "", "/d", "", "/s", "relative", int32(1), int64(256), true, false, true, -1, []byte(nil), "", "", "")
	f.Fuzz(func(t *testing.T, name, cpuModel, kernel, initrd, cmdline, disk, seed, serial, qmp string,
		cpus int32, memMiB int64, tcg, raw, writeback bool, tapFD int, mac []byte, firmware, code, vars string) {
		s := qemu.Spec{
			Name: name, Acceleration: "kvm", CPUModel: cpuModel, GuestSize: vmv1.GuestSize{CPUs: cpus, MemoryMiB: memMiB},
			Kernel: kernel, Initrd: initrd, Cmdline: cmdline,
			DiskPath: disk, DiskFormat: "qcow2", DiskCache: qemu.CacheNone, SeedPath: seed,
			TapFD: tapFD, MAC: net.HardwareAddr(mac), SerialSocket: serial, QMPSocket: qmp,
			Firmware: firmware, FirmwareCode: code, FirmwareVars: vars,
		}
		if tcg {
			s.Acceleration = "tcg"
		}
		if raw {
			s.DiskFormat = "raw"
		}
		if writeback {
			s.DiskCache = qemu.CacheWriteback
		}
		if writeback {
			// A display, from a flag already here, so the stored corpus still fits.
			s.VNCSocket = serial + ".vnc"
		}
		if tapFD < 0 {
			// A negative fd means no tap anyway; the stored corpus keeps its arguments this way.
			s.IncomingSocket = qmp + ".in"
		}
		args, err := qemu.Args(s)
		if err != nil {
			if why := refusable(s); why == "" {
				t.Fatalf("Args refused a spec with nothing wrong: %v", err)
			}
			return
		}
		if why := refusable(s); why != "" {
			t.Fatalf("Args accepted a spec it must refuse (%s): %q", why, args)
		}

		ref := s
		ref.Name, ref.DiskPath, ref.SerialSocket, ref.QMPSocket = phName, phDisk, phSerial, phQMP
		if s.Kernel != "" {
			ref.Kernel, ref.Cmdline = phKernel, phCmdline
		} else {
			ref.FirmwareCode = phCode
			if s.FirmwareVars != "" {
				ref.FirmwareVars = phVars
			}
		}
		if s.CPUModel != "" {
			ref.CPUModel = phCPU
		}
		if s.Initrd != "" {
			ref.Initrd = phInitrd
		}
		if s.SeedPath != "" {
			ref.SeedPath = phSeed
		}
		if s.IncomingSocket != "" {
			ref.IncomingSocket = phIncoming
		}
		if s.VNCSocket != "" {
			ref.VNCSocket = phVNC
		}
		want, err := qemu.Args(ref)
		if err != nil {
			t.Fatalf("the reference spec is refused: %v", err)
		}
		user := map[string]string{phName: s.Name, phCPU: s.CPUModel, phKernel: s.Kernel, phInitrd: s.Initrd,
			phCmdline: s.Cmdline, phDisk: s.DiskPath, phSeed: s.SeedPath, phSerial: s.SerialSocket, phQMP: s.QMPSocket,
			phCode: s.FirmwareCode, phVars: s.FirmwareVars, "unix:" + phIncoming: "unix:" + s.IncomingSocket,
			"unix:" + phVNC: "unix:" + s.VNCSocket}
		checkShape(t, args, want, user)
	})
}

// refusable says why Args must refuse s, or "" when it must accept it.
func refusable(s qemu.Spec) string {
	switch {
	case s.CPUs < vmv1.MinGuestCPUs, s.MemoryMiB < vmv1.MinBootMemoryMiB:
		return "cpus or memory too small"
	case s.DiskPath == "", s.SerialSocket == "", s.QMPSocket == "":
		return "a required path is empty"
	case s.Kernel != "" && (s.Firmware != "" || s.FirmwareCode != "" || s.FirmwareVars != ""):
		return "firmware settings with a kernel"
	case s.Kernel == "" && s.Firmware != qemu.FirmwareBIOS && s.Firmware != qemu.FirmwareUEFI:
		return "neither a kernel nor a known firmware"
	case s.Kernel == "" && (s.Initrd != "" || s.Cmdline != "" || s.FirmwareCode == ""):
		return "an initrd or command line without a kernel, or firmware without its code"
	case s.Kernel == "" && (s.Firmware == qemu.FirmwareUEFI) != (s.FirmwareVars != ""):
		return "a variable store without uefi, or uefi without one"
	case s.TapFD > 0 && len(s.MAC) != 6:
		return "a tap without a 6-byte MAC"
	case strings.Contains(s.CPUModel, ","):
		return "a comma in the CPU model, which -cpu cannot escape"
	case s.IncomingSocket != "" && (!strings.HasPrefix(s.IncomingSocket, "/") || len(s.IncomingSocket) > 107):
		return "an incoming socket that is relative or too long for a unix socket"
	case s.VNCSocket != "" && (!strings.HasPrefix(s.VNCSocket, "/") || len(s.VNCSocket) > 107):
		return "a VNC socket that is relative or too long for a unix socket"
	}
	for _, v := range []string{s.IncomingSocket, s.VNCSocket, s.Name, s.CPUModel, s.Kernel, s.Initrd, s.Cmdline, s.DiskPath, s.SeedPath, s.SerialSocket, s.QMPSocket, s.FirmwareCode, s.FirmwareVars} {
		if strings.ContainsAny(v, "\x00\n\r") {
			return "a NUL or newline"
		}
	}
	return ""
}

// checkShape compares args with want, the argv of the same spec with placeholders for the user
// strings (user maps each placeholder to its string). QEMU decides what is an option by
// walking argv from the start, so equal options at equal places mean it reads args exactly as
// it reads want: every user string sits where QEMU expects an option's value.
func checkShape(t *testing.T, args, want []string, user map[string]string) {
	t.Helper()
	if len(args) != len(want) {
		t.Fatalf("argv has %d elements, the reference %d:\n%q\n%q", len(args), len(want), args, want)
	}
	option := ""
	for i, w := range want {
		if option == "" {
			if args[i] != w || !strings.HasPrefix(w, "-") {
				t.Fatalf("argv[%d] = %q where QEMU reads the option %q\n%q", i, args[i], w, args)
			}
			if i+1 < len(want) && !strings.HasPrefix(want[i+1], "-") {
				option = w // it takes the next element as its value
			}
			continue
		}
		checkValue(t, option, args[i], w, user)
		option = ""
	}
}

func checkValue(t *testing.T, option, got, ref string, user map[string]string) {
	t.Helper()
	if u, ok := user[ref]; ok {
		switch {
		case verbatim[option] && got == u:
			return
		case option == "-cpu" && got == u && !strings.Contains(got, ","):
			return
		case verbatim[option] || option == "-cpu":
			t.Fatalf("%s %q, want exactly %q", option, got, u)
		}
	}
	implied, isList := optionLists[option]
	if !isList {
		if got != ref {
			t.Fatalf("%s %q, want %q (this option carries no user string)", option, got, ref)
		}
		return
	}
	gotOpts, refOpts := parseOpts(got, implied), parseOpts(ref, implied)
	if len(gotOpts) != len(refOpts) {
		t.Fatalf("%s %q parses to %q, want the keys of %q", option, got, gotOpts, refOpts)
	}
	for j, r := range refOpts {
		wantValue := r.value
		if u, ok := user[r.value]; ok {
			wantValue = u
		}
		if gotOpts[j] != (opt{r.key, wantValue}) {
			t.Fatalf("%s %q: option %d parses to %q, want %q=%q", option, got, j, gotOpts[j], r.key, wantValue)
		}
	}
}
