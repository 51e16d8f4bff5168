package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/virtpod/virtpod/pkg/cloudhypervisor"
)

// cloud-hypervisor resize: vm.resize with the desired vCPUs and total RAM; the guest has them
// once vm.info reports its boot_vcpus and memory_actual_size (what virtio-mem really plugged).

func (c *chVM) guestSize(ctx context.Context) (int32, int64, error) {
	info, err := c.client.Info(ctx)
	if err != nil {
		select {
		case <-c.exited:
			return 0, 0, errNotRunning
		default:
		}
		return 0, 0, err
	}
	if info.State != cloudhypervisor.StateRunning && info.State != cloudhypervisor.StatePaused {
		return 0, 0, fmt.Errorf("%w (cloud-hypervisor: %s)", errNotRunning, info.State)
	}
	mem := info.MemoryActualSize
	if mem == 0 {
		mem = info.Config.Memory.Size
	}
	return info.Config.CPUs.BootVCPUs, mem >> 20, nil
}

func (c *chVM) resize(ctx context.Context, cpus int32, memMiB int64) error {
	if _, _, err := c.guestSize(ctx); err != nil {
		return err
	}
	if err := c.client.Resize(ctx, cloudhypervisor.VMResize{DesiredVCPUs: cpus, DesiredRAM: memMiB << 20}); err != nil {
		return err
	}
	for {
		got, mem, err := c.guestSize(ctx)
		if err != nil {
			return err
		}
		if got == cpus && mem == memMiB {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the guest took %d vCPUs and %s of %d and %s in time: %w", got, quantity(mem), cpus, quantity(memMiB), ctx.Err())
		case <-time.After(resizePoll):
		}
	}
}

var _ resizer = (*chVM)(nil)
