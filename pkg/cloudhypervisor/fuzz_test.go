package cloudhypervisor_test

import (
	"encoding/json"
	"math"
	"net"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/cloudhypervisor"
)

// FuzzBuild: the guest's configuration reaches cloud-hypervisor as the JSON body of vm.create,
// and its command line carries only the API socket. Whatever the strings in a Spec, the JSON
// has exactly the fields of the same spec with harmless strings, each string decodes back to
// exactly itself, and --api-socket names exactly the socket, adding no option (such as fd=).
func FuzzBuild(f *testing.F) {
	mac := []byte{0x52, 0x54, 0, 0x12, 0x34, 0x56}
	f.Add("/virtpod/images/kernel/boot/vmlinuz", "/virtpod/images/kernel/boot/initrd.img", "console=ttyS0 root=/dev/vda rw",
		"/var/run/virtpod/root.qcow2", "/var/run/virtpod/cidata.img", "vp-tap0", "/var/run/virtpod/serial.sock", "/var/run/virtpod/ch.sock",
		int32(2), int64(1024), false, true, mac, 1450, "")
	f.Add("/k", "", `console=ttyS0 "},"disks":[{"path":"/etc/shadow"}],"x":{"`, `/d","readonly":false,"path":"/etc/shadow`,
		`/c","readonly":false,"x":"`, `t","mac":"00:00:00:00:00:00`, "/s\x00", "/run/ch,fd=3", int32(1), int64(16), true, false, mac, 0, "")
	f.Add("/k\xff", "/i", "\u2028<script>&", "/d", "", "", "/s", "path=/etc/x", int32(255), int64(1<<20), false, false, []byte(nil), -1, "")
	f.Add("/k", "/i", "", "/d", "", "", "/s", ` "/a[b]"" `, int32(4), int64(8796093022208), true, true, []byte(nil), 9000, "")
	f.Add("", "", "", "/var/run/virtpod/root.qcow2", "", "vp-tap0", "/var/run/virtpod/serial.sock", "/var/run/virtpod/ch.sock",
		int32(1), int64(512), false, true, mac, 1450, "/usr/share/cloud-hypervisor/CLOUDHV.fd")
	f.Add("", "", "", "/d", "", "", "/s", "/c", int32(1), int64(512), true, false, []byte(nil), 0, `/fw","kernel":"/etc/shadow`)
	f.Fuzz(func(t *testing.T, kernel, initrd, cmdline, disk, seed, tap, serial, socket string,
		cpus int32, memMiB int64, raw, direct bool, mac []byte, mtu int, firmware string) {
		checkArgs(t, socket)

		s := cloudhypervisor.Spec{
			GuestSize: vmv1.GuestSize{CPUs: cpus, MemoryMiB: memMiB}, Kernel: kernel, Initrd: initrd, Cmdline: cmdline,
			DiskPath: disk, DiskFormat: "qcow2", DirectIO: direct, SeedPath: seed,
			TapName: tap, MAC: net.HardwareAddr(mac), MTU: mtu, SerialSocket: serial, Firmware: firmware,
		}
		if raw {
			s.DiskFormat = "raw"
		}
		cfg, err := cloudhypervisor.Build(s)
		why := refusable(s)
		if err != nil {
			if why == "" {
				t.Fatalf("Build refused a spec with nothing wrong: %v", err)
			}
			return
		}
		if why != "" {
			t.Fatalf("Build accepted a spec it must refuse (%s): %+v", why, cfg)
		}
		if cfg.Memory.Size>>20 != s.MemoryMiB || cfg.Memory.Size < 0 {
			t.Fatalf("memory %d MiB became %d bytes", s.MemoryMiB, cfg.Memory.Size)
		}

		body, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var back cloudhypervisor.VMConfig
		if err := json.Unmarshal(body, &back); err != nil || !reflect.DeepEqual(back, cfg) {
			t.Fatalf("vm.create body %s decodes to %+v (%v), not the configuration %+v", body, back, err, cfg)
		}

		// The same spec with a placeholder for each non-empty string (empty ones are omitted).
		ref, user := s, map[string]string{}
		for _, p := range []struct {
			field *string
			ph    string
		}{{&ref.Kernel, "/KERNEL"}, {&ref.Initrd, "/INITRD"}, {&ref.Cmdline, "CMDLINE"}, {&ref.DiskPath, "/DISK"},
			{&ref.SeedPath, "/SEED"}, {&ref.TapName, "TAP"}, {&ref.SerialSocket, "/SERIAL"}, {&ref.Firmware, "/FIRMWARE"}} {
			if *p.field != "" {
				user[p.ph], *p.field = *p.field, p.ph
			}
		}
		refCfg, err := cloudhypervisor.Build(ref)
		if err != nil {
			t.Fatalf("the reference spec is refused: %v", err)
		}
		refBody, _ := json.Marshal(refCfg)
		var got, want any
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(refBody, &want); err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "", got, want, user)
	})
}

// checkArgs: the command line is --api-socket and one value that cloud-hypervisor reads as
// exactly the socket's path.
func checkArgs(t *testing.T, socket string) {
	t.Helper()
	args := cloudhypervisor.Args(socket)
	if len(args) != 2 || args[0] != "--api-socket" {
		t.Fatalf("Args(%q) = %q, want --api-socket and one value", socket, args)
	}
	v := args[1]
	if strings.HasPrefix(v, "-") {
		t.Fatalf("Args(%q): the value %q would be read as a flag", socket, v)
	}
	if !utf8.ValidString(v) {
		return // clap refuses a value that is not UTF-8: cloud-hypervisor exits, reading nothing
	}
	path, fd := apiSocket(v)
	// "./" + a relative path names the same file.
	if fd != "" || (path != socket && path != "./"+socket) {
		t.Fatalf("Args(%q) = %q: cloud-hypervisor reads path %q fd %q", socket, args, path, fd)
	}
}

// refusable says why Build must refuse s, or "" when it must accept it.
func refusable(s cloudhypervisor.Spec) string {
	switch {
	case s.CPUs < vmv1.MinGuestCPUs, s.MemoryMiB < vmv1.MinBootMemoryMiB:
		return "cpus or memory too small"
	case s.DiskPath == "", s.SerialSocket == "":
		return "a required path is empty"
	case (s.Kernel == "") == (s.Firmware == ""):
		return "neither or both of a kernel and a firmware"
	case s.Kernel == "" && (s.Initrd != "" || s.Cmdline != ""):
		return "an initrd or command line without a kernel"
	case s.TapName != "" && len(s.MAC) != 6:
		return "a tap without a 6-byte MAC"
	case strings.ContainsAny(s.Cmdline, "\x00\n\r"):
		return "a NUL or newline in the command line"
	case s.MemoryMiB > math.MaxInt64>>20:
		return "more memory than an int64 counts in bytes"
	}
	for _, v := range []string{s.Kernel, s.Initrd, s.Cmdline, s.Firmware, s.DiskPath, s.SeedPath, s.TapName, s.SerialSocket} {
		if !utf8.ValidString(v) {
			return "a string that is not UTF-8, which JSON cannot carry"
		}
	}
	return ""
}

// sameJSON compares a decoded vm.create body with the reference's: the same keys everywhere,
// the same values, except that a placeholder stands for its user string.
func sameJSON(t *testing.T, at string, got, want any, user map[string]string) {
	t.Helper()
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			t.Fatalf("%s: %v, want the fields of %v", at, got, w)
		}
		for k := range w {
			sameJSON(t, at+"."+k, g[k], w[k], user)
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			t.Fatalf("%s: %v, want %d elements", at, got, len(w))
		}
		for i := range w {
			sameJSON(t, at, g[i], w[i], user)
		}
	case string:
		if u, ok := user[w]; ok {
			w = u
		}
		if got != w {
			t.Fatalf("%s: %q, want %q", at, got, w)
		}
	default:
		if got != want {
			t.Fatalf("%s: %v, want %v", at, got, want)
		}
	}
}
