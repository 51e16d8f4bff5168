package boot

import (
	"io"
	"os"

	"go.uber.org/zap"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/handoff"
	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// OpenBzImage opens the VM's kernel when it is a bzImage, which QEMU would copy into its own
// memory for the VM's life, to hand to the node agent with the pod's network namespace
// (pkg/handoff): the agent answers with the PVH kernel inside it (pkg/kernel/kernelcache), which
// QEMU loads from the file. Only for QEMU (cloud-hypervisor boots a PVH kernel only) and a VM
// with a pod network (without one, no agent is asked). It also returns the bzImage's size,
// what QEMU's copy costs, for the log; 0 for a kernel that is not a bzImage.
func OpenBzImage(cfg runnerconfig.Config) (*os.File, int64) {
	if cfg.Kernel == "" {
		return nil, 0
	}
	f, err := os.Open(cfg.Kernel)
	if err != nil {
		return nil, 0
	}
	head := make([]byte, 0x206)
	if _, err := io.ReadFull(f, head); err != nil || !pvhkernel.IsBzImage(head) {
		f.Close()
		return nil, 0
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0
	}
	if cfg.Provider != runnerconfig.ProviderQEMU || cfg.Network == vmv1.NetworkNone {
		f.Close()
		return nil, fi.Size()
	}
	return f, fi.Size()
}

// LogKernel says how a bzImage kernel boots: the PVH kernel the node agent unpacked, or the
// bzImage itself with what QEMU's copy costs and why there is no unpacked kernel.
func LogKernel(cfg runnerconfig.Config, bzSize int64, k handoff.Kernel, log *zap.Logger) {
	switch {
	case bzSize == 0:
	case k.File != nil:
		log.Info("the kernel is a bzImage: booting the PVH kernel inside it, which the node agent unpacked (QEMU holds no copy)",
			zap.String("kernel", cfg.Kernel), zap.Int64("bzImageBytes", bzSize))
	default:
		why := k.Refused
		if why == "" {
			why = "no node agent was asked (no pod network, or not QEMU)"
		}
		log.Info("the kernel is a bzImage: QEMU holds a copy of it for the VM's life, memory the pod's reservation may not cover; `imagebuild vm` stores the PVH vmlinux inside it instead (docs/images.md)",
			zap.String("kernel", cfg.Kernel), zap.Int64("copyBytes", bzSize), zap.String("notUnpacked", why))
	}
}
