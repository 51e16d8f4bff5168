package binaries

import "testing"

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvQEMU, "")
	t.Setenv(EnvQEMUImg, "/opt/qemu-img")
	t.Setenv(EnvCloudHypervisor, "")
	t.Setenv(EnvVirtiofsd, "/opt/virtiofsd")
	want := Paths{QEMU: "/usr/bin/qemu-system-x86_64", QEMUImg: "/opt/qemu-img", CloudHypervisor: "/usr/bin/cloud-hypervisor", Virtiofsd: "/opt/virtiofsd"}
	if got := FromEnv(); got != want {
		t.Fatalf("FromEnv() = %+v, want %+v", got, want)
	}
}
