package cloudhypervisor

import (
	"net"
	"reflect"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	chapi "github.com/virtpod/virtpod/pkg/cloudhypervisor"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// TestSpecTranslatesEveryField: the neutral machine becomes the vm.create builder's Spec:
// the tap by name (cloud-hypervisor opens it), O_DIRECT where the disk's and the seed's
// directories take it, a qcow2 image disk named as one.
func TestSpecTranslatesEveryField(t *testing.T) {
	mac := net.HardwareAddr{0x52, 0x54, 0, 0x12, 0x34, 0x56}
	size := vmv1.GuestSize{CPUs: 2, MaxCPUs: 4, MemoryMiB: 256, MaxMemoryMiB: 1024}
	m := hypervisor.Machine{
		Name: "vm", Acceleration: "kvm", GuestSize: size,
		Boot:       hypervisor.Boot{Kernel: "/images/vmlinux", Initrd: "/images/initrd", Cmdline: "console=ttyS0"},
		Root:       hypervisor.Disk{Path: "/state/root.qcow2", Format: "qcow2", Direct: true},
		SeedDirect: true,
		Seed:       "/state/cidata.iso",
		Disks:      []hypervisor.Disk{{Serial: "data", Path: "/data/disk.img", Format: "raw", Direct: true}, {Serial: "tools", Path: "/images/tools.qcow2", Format: "qcow2", ReadOnly: true}, {Serial: "conf", Path: "/state/conf.iso", Format: "raw", ReadOnly: true}},
		NIC:        &hypervisor.NIC{Tap: "tap0", MAC: mac, MTU: 1450},
		Sockets:    hypervisor.Sockets{Serial: "/state/serial.sock", Control: "/state/cloud-hypervisor.sock"},
	}
	want := chapi.Spec{
		GuestSize: size, Kernel: "/images/vmlinux", Initrd: "/images/initrd", Cmdline: "console=ttyS0",
		DiskPath: "/state/root.qcow2", DiskFormat: "qcow2", DirectIO: true, SeedPath: "/state/cidata.iso",
		Disks: []chapi.DataDisk{
			{Serial: "data", Path: "/data/disk.img", DirectIO: true},
			{Serial: "tools", Path: "/images/tools.qcow2", Qcow2: true, ReadOnly: true},
			{Serial: "conf", Path: "/state/conf.iso", ReadOnly: true},
		},
		TapName: "tap0", MAC: mac, MTU: 1450, SerialSocket: "/state/serial.sock",
	}
	if got := spec(m); !reflect.DeepEqual(got, want) {
		t.Errorf("spec:\n got %+v\nwant %+v", got, want)
	}
	if _, err := chapi.Build(spec(m)); err != nil {
		t.Errorf("the translated spec does not build: %v", err)
	}
	// A state directory without O_DIRECT: the root disk goes through the page cache too.
	m.SeedDirect = false
	if spec(m).DirectIO {
		t.Error("DirectIO with a seed directory that does not take O_DIRECT")
	}
	fw := m
	fw.Boot = hypervisor.Boot{Firmware: "uefi", FirmwareCode: "/usr/share/cloud-hypervisor/CLOUDHV.fd"}
	if got := spec(fw); got.Kernel != "" || got.Firmware != "/usr/share/cloud-hypervisor/CLOUDHV.fd" {
		t.Errorf("firmware boot: kernel %q, firmware %q", got.Kernel, got.Firmware)
	}
}
