package runnerconfig_test

import (
	"flag"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
)

// FuzzArgsRoundTrip: for every configuration Validate accepts, parsing Args back through Bind
// gives the same configuration, with no argument left over. A user string (the VM's name, its
// kernel arguments, a port name) is one flag's value, so it cannot set another flag.
func FuzzArgsRoundTrip(f *testing.F) {
	f.Add("web", "qemu", "kvm", int32(2), int64(1024), "/virtpod/images/kernel/boot/vmlinuz", "/virtpod/images/kernel/boot/initrd.img",
		"console=ttyS0 quiet", "/virtpod/images/disk/disk/root.img", int64(10240), "22/TCP ssh\n53/UDP dns", "/var/run/virtpod", "127.0.0.1:8080", "pod", int64(30),
		"0b5f6a43-1111-2222-3333-444455556666", "/virtpod/cloud-init/user-data", "/virtpod/cloud-init/network-config", "", "http:8080/healthz?full=1")
	f.Add("evil", "qemu", "tcg", int32(1), int64(256), "/k", "", "x --name=root --network=none\t--port=a:1/TCP", "/d", int64(0),
		"80/TCP http", "", "", "", int64(0), "x --cloud-init-user-data=/etc/shadow", "/u", "", "", "tcp:22")
	f.Add("a=b", "cloud-hypervisor", "kvm", int32(255), int64(16), "-k", "--initrd=", "--", "=", int64(-1), "", "/s", ":0", "none", int64(-5), "", "", "/n", "bios", "http:1")
	f.Add("", "qemu", "kvm", int32(1), int64(64), "/k", "", "", "/d", int64(64), "80/TCP a:b\n81/UDP a/b\n82/TCP z", "", "", "", int64(3600), "", "", "", "", "tcp:80/x")
	// Firmware boot: no kernel, the default firmware (bios) or uefi.
	f.Add("debian", "qemu", "tcg", int32(1), int64(512), "", "", "", "/virtpod/images/disk/disk/root.img", int64(0), "22/TCP ssh", "", "", "pod", int64(30), "", "", "", "", "tcp:22")
	f.Add("debian", "qemu", "kvm", int32(1), int64(512), "", "", "", "/d", int64(0), "", "", "", "pod", int64(30), "", "", "", "uefi", "http:80/")
	// Resizable: 1 of 4 CPUs, 256 of 1024 MiB; no control socket; the default one.
	f.Add("vm max=4/1024", "qemu", "tcg", int32(1), int64(256), "/k", "", "", "/d", int64(0), "", "/s", "none", "none", int64(30), "", "", "", "", "")
	f.Add("vm max=8/4096", "cloud-hypervisor", "kvm", int32(2), int64(1024), "/k", "", "", "/d", int64(0), "", "/s", "default", "pod", int64(30), "", "", "", "", "")
	// A migration target; one without the control socket it needs; one under cloud-hypervisor.
	f.Add("vm incoming", "qemu", "tcg", int32(1), int64(256), "/k", "", "", "/d", int64(0), "", "/s", "", "none", int64(30), "", "", "", "", "")
	f.Add("vm incoming", "qemu", "tcg", int32(1), int64(256), "/k", "", "", "/d", int64(0), "", "/s", "none", "none", int64(30), "", "", "", "", "")
	f.Add("vm incoming", "cloud-hypervisor", "kvm", int32(1), int64(256), "/k", "", "", "/d", int64(0), "", "/s", "", "pod", int64(30), "", "", "", "", "")
	addDisplaySeeds(f)
	f.Add("both", "qemu", "kvm", int32(1), int64(512), "/k", "", "", "/d", int64(0), "", "", "", "pod", int64(30), "", "", "", "uefi", "")
	f.Fuzz(func(t *testing.T, name, provider, accel string, cpus int32, memMiB int64, kernel, initrd, kernelArgs, rootDisk string,
		diskMiB int64, ports, stateDir, httpAddr, network string, grace int64, instanceID, userData, networkData, firmware, probe string) {
		// The resize flags come from the strings already here, so the stored corpus still fits.
		maxCPUs, maxMemMiB, control := resizeFromFuzz(name, httpAddr, stateDir)
		// network is --network's value; "" leaves it to Defaults.
		var mode vmv1.NetworkMode
		if network != "" {
			var err error
			if mode, err = vmv1.ParseNetworkFlag(network); err != nil {
				return // the runner refuses it
			}
		}
		c := runnerconfig.Config{
			Name: name, Provider: provider, Acceleration: accel, GuestSize: vmv1.GuestSize{CPUs: cpus, MemoryMiB: memMiB, MaxCPUs: maxCPUs, MaxMemoryMiB: maxMemMiB},
			Kernel: kernel, Initrd: initrd, KernelArgs: kernelArgs, RootDisk: rootDisk, DiskSizeMiB: diskMiB,
			StateDir: stateDir, HTTPAddr: httpAddr, Network: mode, GracePeriodSeconds: grace,
			InstanceID: instanceID, CloudInitUserData: userData, CloudInitNetworkData: networkData, Firmware: firmware,
			ControlSocket: control,
			// A migration target: from the name too, so the stored corpus still fits.
			Incoming: strings.Contains(name, "incoming"),
			Display:  displayFromFuzz(name), // from the name as well
		}
		var err error
		if c.ReadinessProbe, err = runnerconfig.ParseProbe(probe); err != nil {
			return // not a probe the flag reads
		}
		for line := range strings.Lines(ports) {
			p, ok := decodePort(strings.TrimSuffix(line, "\n"))
			if !ok {
				return // not a port in this test's encoding
			}
			c.Ports = append(c.Ports, p)
		}
		c.Defaults()
		if c.Validate() != nil {
			return // the runner refuses it; only valid configurations are ever rendered
		}
		args := c.Args()

		var got runnerconfig.Config
		fs := flag.NewFlagSet("runner", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		got.Bind(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatalf("Args %q do not parse: %v", args, err)
		}
		if fs.NArg() != 0 {
			t.Fatalf("Args %q left positional arguments %q", args, fs.Args())
		}
		// Args lists ports by name; the order of ports carries no meaning.
		want := c
		want.Ports = append([]runnerconfig.Port(nil), c.Ports...)
		sort.SliceStable(want.Ports, func(i, j int) bool { return want.Ports[i].Name < want.Ports[j].Name })
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip changed the configuration\nargs %q\n got %+v\nwant %+v", args, got, want)
		}
		parsed, err := runnerconfigtest.Parse(args)
		if err != nil || !reflect.DeepEqual(parsed, want) {
			t.Fatalf("Parse(%q) = %+v, %v; want %+v", args, parsed, err, want)
		}
	})
}

// decodePort reads "PORT/PROTOCOL NAME": the name is the rest of the line, so it may hold any
// character but a newline (':' and '/' included, which the flag syntax also uses).
func decodePort(line string) (runnerconfig.Port, bool) {
	head, name, ok := strings.Cut(line, " ")
	if !ok {
		return runnerconfig.Port{}, false
	}
	num, proto, _ := strings.Cut(head, "/")
	n, err := strconv.ParseInt(num, 10, 32)
	if err != nil {
		return runnerconfig.Port{}, false
	}
	return runnerconfig.Port{Name: name, Port: int32(n), Protocol: proto}, true
}

// resizeFromFuzz derives the resize settings from strings the fuzzer already varies: a decimal
// count and MiB after "max=" in the name, and a control socket from the HTTP address ("none"
// for none, "default" for the flag's default, else the state directory's path).
func resizeFromFuzz(name, httpAddr, stateDir string) (int32, int64, string) {
	var cpus int32
	var mib int64
	if _, rest, ok := strings.Cut(name, "max="); ok {
		c, m, _ := strings.Cut(rest, "/")
		n, _ := strconv.ParseInt(c, 10, 32)
		cpus = int32(n)
		mib, _ = strconv.ParseInt(m, 10, 64)
	}
	switch httpAddr {
	case "none":
		return cpus, mib, ""
	case "default":
		return cpus, mib, runnerconfig.DefaultControlSocket
	}
	return cpus, mib, stateDir + "/control.sock"
}

// addDisplaySeeds adds a guest with a display, and one under cloud-hypervisor, which has none.
func addDisplaySeeds(f *testing.F) {
	f.Add("vm vnc", "qemu", "tcg", int32(1), int64(256), "/k", "", "", "/d", int64(0), "", "", "", "pod", int64(30), "", "", "", "", "")
	f.Add("vm vnc", "cloud-hypervisor", "kvm", int32(1), int64(256), "/k", "", "", "/d", int64(0), "", "", "", "pod", int64(30), "", "", "", "", "")
}

// displayFromFuzz is vnc for a name that says so, else empty (Defaults' none).
func displayFromFuzz(name string) string {
	if strings.Contains(name, "vnc") {
		return runnerconfig.DisplayVNC
	}
	return ""
}
