package qemu

import (
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	qemuargs "github.com/virtpod/virtpod/pkg/qemu"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// TestSpecTranslatesEveryField: the neutral machine becomes pkg/qemu's Spec field for field;
// the files QEMU gets open are the tap (fd 3), then the kernel (named by its fd), in that order.
func TestSpecTranslatesEveryField(t *testing.T) {
	dir := t.TempDir()
	tap, kernel := openTemp(t, dir, "tap"), openTemp(t, dir, "kernel")
	mac := net.HardwareAddr{0x52, 0x54, 0, 0x12, 0x34, 0x56}
	size := vmv1.GuestSize{CPUs: 2, MaxCPUs: 4, MemoryMiB: 256, MaxMemoryMiB: 1024}
	m := hypervisor.Machine{
		Name: "vm", Acceleration: "tcg", Type: "pc-q35-7.2", CPUModel: "max", GuestSize: size,
		Boot:         hypervisor.Boot{Kernel: "/images/vmlinuz", KernelFile: kernel, Initrd: "/images/initrd", Cmdline: "console=ttyS0"},
		Root:         hypervisor.Disk{Path: "/state/root.qcow2", Format: "qcow2", Direct: true},
		Seed:         "/state/cidata.iso",
		Disks:        []hypervisor.Disk{{Serial: "data", Path: "/dev/data", Format: "raw", Block: true, Direct: true, Hotplug: true, Slot: 1}, {Serial: "conf", Path: "/state/conf.iso", Format: "raw", ReadOnly: true}},
		HotplugSlots: 2,
		Shares:       []hypervisor.Share{{Tag: "conf", Socket: "/state/fs-conf.sock"}},
		NIC:          &hypervisor.NIC{Tap: "tap0", TapFile: tap, MAC: mac, MTU: 1500},
		Sockets: hypervisor.Sockets{Serial: "/state/serial.sock", Control: "/state/qmp.sock", Agent: "/state/qga.sock",
			Incoming: "/ctl/migrate-in.sock", Display: "/state/vnc.sock"},
	}
	got, files := spec(m)
	want := qemuargs.Spec{
		Name: "vm", Acceleration: "tcg", Machine: "pc-q35-7.2", CPUModel: "max", GuestSize: size,
		Kernel: "/proc/self/fd/4", Initrd: "/images/initrd", Cmdline: "console=ttyS0",
		DiskPath: "/state/root.qcow2", DiskFormat: "qcow2", DiskCache: qemuargs.CacheNone, SeedPath: "/state/cidata.iso",
		Disks: []qemuargs.Drive{
			{Serial: "data", Path: "/dev/data", Format: "raw", Block: true, Cache: qemuargs.CacheNone, Hotplug: true, Slot: 1},
			{Serial: "conf", Path: "/state/conf.iso", Format: "raw", ReadOnly: true, Cache: qemuargs.CacheWriteback},
		},
		Filesystems: []qemuargs.Filesystem{{Tag: "conf", Socket: "/state/fs-conf.sock"}},
		TapFD:       3, MAC: mac,
		SerialSocket: "/state/serial.sock", QMPSocket: "/state/qmp.sock", AgentSocket: "/state/qga.sock", IncomingSocket: "/ctl/migrate-in.sock",
		VNCSocket: "/state/vnc.sock", HotplugSlots: 2,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("spec:\n got %+v\nwant %+v", got, want)
	}
	if len(files) != 2 || files[0] != tap || files[1] != kernel {
		t.Errorf("files handed to QEMU %v, want the tap then the kernel", files)
	}
	boots := got
	boots.IncomingSocket = "" // a target with shares is refused: virtiofsd's state does not migrate
	if _, err := qemuargs.Args(boots); err != nil {
		t.Errorf("the translated spec does not build: %v", err)
	}

	if args, _ := qemuargs.Args(boots); !slices.Contains(args, "unix:/state/vnc.sock") {
		t.Errorf("the display's socket is not QEMU's VNC display: %q", args)
	}

	// Without a network the kernel is fd 3; a firmware boot keeps its files and hands none.
	m.NIC = nil
	if got, files := spec(m); got.Kernel != "/proc/self/fd/3" || got.TapFD != 0 || len(files) != 1 {
		t.Errorf("no network: kernel %q, tap fd %d, files %v", got.Kernel, got.TapFD, files)
	}
	fw := hypervisor.Machine{Acceleration: "tcg", GuestSize: size, Root: m.Root, Sockets: m.Sockets,
		Boot: hypervisor.Boot{Firmware: "uefi", FirmwareCode: "/usr/share/OVMF/OVMF_CODE.fd", FirmwareVars: "/state/uefi-vars.fd"}}
	if got, files := spec(fw); got.Kernel != "" || got.Firmware != "uefi" || got.FirmwareCode != "/usr/share/OVMF/OVMF_CODE.fd" || got.FirmwareVars != "/state/uefi-vars.fd" || len(files) != 0 {
		t.Errorf("firmware boot: %+v, files %v", got, files)
	}
}

func openTemp(t *testing.T, dir, name string) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
