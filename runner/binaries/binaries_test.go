package binaries

import "testing"

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvQEMU, "")
	t.Setenv(EnvQEMUImg, "/opt/qemu-img")
	t.Setenv(EnvCloudHypervisor, "")
	want := Paths{QEMU: "/usr/bin/qemu-system-x86_64", QEMUImg: "/opt/qemu-img", CloudHypervisor: "/usr/bin/cloud-hypervisor"}
	if got := FromEnv(); got != want {
		t.Fatalf("FromEnv() = %+v, want %+v", got, want)
	}
}
