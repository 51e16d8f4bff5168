package cloudhypervisor

import (
	"context"
	"fmt"
	"time"

	chapi "github.com/virtpod/virtpod/pkg/cloudhypervisor"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// cloud-hypervisor resize: vm.resize with the desired vCPUs and total RAM; the guest has them
// once vm.info reports its boot_vcpus and memory_actual_size (what virtio-mem really plugged).

// resizePoll is how often a resize looks whether the guest took it.
const resizePoll = 20 * time.Millisecond

func (c *VM) GuestSize(ctx context.Context) (int32, int64, error) {
	info, err := c.client.Info(ctx)
	if err != nil {
		select {
		case <-c.exited:
			return 0, 0, hypervisor.ErrNotRunning
		default:
		}
		return 0, 0, err
	}
	if info.State != chapi.StateRunning && info.State != chapi.StatePaused {
		return 0, 0, fmt.Errorf("%w (cloud-hypervisor: %s)", hypervisor.ErrNotRunning, info.State)
	}
	mem := info.MemoryActualSize
	if mem == 0 {
		mem = info.Config.Memory.Size
	}
	return info.Config.CPUs.BootVCPUs, mem >> 20, nil
}

func (c *VM) Resize(ctx context.Context, cpus int32, memMiB int64) error {
	if _, _, err := c.GuestSize(ctx); err != nil {
		return err
	}
	if err := c.client.Resize(ctx, chapi.VMResize{DesiredVCPUs: cpus, DesiredRAM: memMiB << 20}); err != nil {
		return err
	}
	for {
		got, mem, err := c.GuestSize(ctx)
		if err != nil {
			return err
		}
		if got == cpus && mem == memMiB {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the guest took %d vCPUs and %s of %d and %s in time: %w", got, hypervisor.Quantity(mem), cpus, hypervisor.Quantity(memMiB), ctx.Err())
		case <-time.After(resizePoll):
		}
	}
}

var _ hypervisor.Resizer = (*VM)(nil)
