package boot

import (
	"os"
	"path/filepath"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel/pvhkerneltest"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// TestOpenBzImage: a bzImage is opened to hand to the node agent only where an agent is asked
// (a pod network) and the kernel it answers with can boot (QEMU); its size is known either way.
func TestOpenBzImage(t *testing.T) {
	dir := t.TempDir()
	elf := pvhkerneltest.ELF([]byte("text"), true)
	bz := pvhkerneltest.BzImage(elf, "gzip")
	for name, b := range map[string][]byte{"vmlinuz": bz, "vmlinux": elf, "short": bz[:0x100]} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := func(kernel, provider string, network vmv1.NetworkMode) runnerconfig.Config {
		return runnerconfig.Config{Kernel: filepath.Join(dir, kernel), Provider: provider, Network: network}
	}
	for _, c := range []struct {
		name     string
		cfg      runnerconfig.Config
		open     bool
		wantSize int64
	}{
		{"QEMU, pod network", cfg("vmlinuz", runnerconfig.ProviderQEMU, vmv1.NetworkPod), true, int64(len(bz))},
		{"QEMU, masquerade", cfg("vmlinuz", runnerconfig.ProviderQEMU, vmv1.NetworkMasquerade), true, int64(len(bz))},
		{"QEMU, no network", cfg("vmlinuz", runnerconfig.ProviderQEMU, vmv1.NetworkNone), false, int64(len(bz))},
		{"cloud-hypervisor", cfg("vmlinuz", runnerconfig.ProviderCloudHypervisor, vmv1.NetworkPod), false, int64(len(bz))},
		{"a PVH vmlinux", cfg("vmlinux", runnerconfig.ProviderQEMU, vmv1.NetworkPod), false, 0},
		{"cut short", cfg("short", runnerconfig.ProviderQEMU, vmv1.NetworkPod), false, 0},
		{"missing", cfg("missing", runnerconfig.ProviderQEMU, vmv1.NetworkPod), false, 0},
		{"firmware boot", runnerconfig.Config{Provider: runnerconfig.ProviderQEMU, Network: vmv1.NetworkPod}, false, 0},
	} {
		f, size := OpenBzImage(c.cfg)
		if (f != nil) != c.open || size != c.wantSize {
			t.Errorf("%s: opened %v, size %d; want opened %v, size %d", c.name, f != nil, size, c.open, c.wantSize)
		}
		if f != nil {
			f.Close()
		}
	}
}
