package qemu

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	qemuargs "github.com/virtpod/virtpod/pkg/qemu"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// QEMU resize through QMP (docs/runner.md): vCPUs with device_add/device_del of the slots
// query-hotpluggable-cpus lists, acknowledged when the guest's ACPI _OST reports the insertion
// (query-acpi-ospm-status); memory with virtio-mem's requested-size, taken when the device's
// size (what the guest driver plugged) reaches it.

// resizePoll is how often a resize looks whether the guest took it.
const resizePoll = 20 * time.Millisecond

type hotCPU struct {
	Type    string         `json:"type"`
	QOMPath string         `json:"qom-path"`
	Props   map[string]any `json:"props"`
}

// id is the device id of a plugged vCPU, "" for the boot CPU (which has none and stays).
func (c hotCPU) id() string {
	if strings.HasPrefix(c.QOMPath, "/machine/peripheral/") {
		return path.Base(c.QOMPath)
	}
	return ""
}

func (c hotCPU) socket() int {
	n, _ := c.Props["socket-id"].(float64)
	return int(n)
}

type ospmStatus struct {
	Device string `json:"device"`
	Slot   string `json:"slot"`
	Type   string `json:"slot-type"`
	Source int    `json:"source"`
	Status int    `json:"status"`
}

// cpus lists the vCPU slots and which hot-added ones the guest acknowledged.
func (q *VM) cpus() (slots []hotCPU, acked map[string]bool, err error) {
	if err := q.qmpRun("query-hotpluggable-cpus", nil, &slots); err != nil {
		return nil, nil, err
	}
	var ospm []ospmStatus
	if err := q.qmpRun("query-acpi-ospm-status", nil, &ospm); err != nil {
		return nil, nil, err
	}
	acked = map[string]bool{}
	for _, o := range ospm {
		// Source 1 is ACPI's device-check (insertion) notification; status 0 is success.
		if o.Type == "CPU" && o.Device != "" && o.Source == 1 && o.Status == 0 {
			acked[o.Device] = true
		}
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i].socket() < slots[j].socket() })
	return slots, acked, nil
}

// onlineCPUs counts plugged vCPUs the guest has: those on the command line, and hot-added ones
// it acknowledged.
func (q *VM) onlineCPUs(slots []hotCPU, acked map[string]bool) int32 {
	q.resizeMu.Lock()
	defer q.resizeMu.Unlock()
	var n int32
	for _, s := range slots {
		if s.QOMPath != "" && (!q.hotAdded[s.id()] || acked[s.id()]) {
			n++
		}
	}
	return n
}

func (q *VM) pluggedMemMiB() (int64, error) {
	if !q.spec.MemoryHotplug() {
		return 0, nil
	}
	var size int64
	err := q.qmpRun("qom-get", map[string]any{"path": "/machine/peripheral/" + qemuargs.VirtioMemID, "property": "size"}, &size)
	return size >> 20, err
}

func (q *VM) GuestSize(context.Context) (int32, int64, error) {
	cpus, _, mem, err := q.state()
	return cpus, mem, err
}

// state is the acknowledged and plugged vCPU counts and the guest's memory.
func (q *VM) state() (acked, plugged int32, memMiB int64, err error) {
	slots, ack, err := q.cpus()
	if err != nil {
		return 0, 0, 0, err
	}
	for _, s := range slots {
		if s.QOMPath != "" {
			plugged++
		}
	}
	mem, err := q.pluggedMemMiB()
	if err != nil {
		return 0, 0, 0, err
	}
	return q.onlineCPUs(slots, ack), plugged, q.spec.MemoryMiB + mem, nil
}

// Resize changes one thing at a time and waits for the guest to take it: memory and vCPUs
// unplugged together can stall a guest kernel (offlining memory drains work on every CPU while a
// CPU goes away), so a shrink gives memory back first, while every vCPU can help migrate pages,
// and a grow adds vCPUs first. vCPUs are added and removed one by one.
func (q *VM) Resize(ctx context.Context, cpus int32, memMiB int64) error {
	_, plugged, _, err := q.state()
	if err != nil {
		return err
	}
	steps := []func() error{func() error { return q.setMemory(ctx, memMiB) }, func() error { return q.setCPUs(ctx, cpus) }}
	if cpus > plugged {
		steps[0], steps[1] = steps[1], steps[0]
	}
	for _, step := range steps {
		if err := step(); err != nil {
			if ctx.Err() != nil {
				c, p, m, _ := q.state()
				return fmt.Errorf("the guest did not take %d vCPUs and %s in time: it has %d vCPUs (%d plugged) and %s: %w",
					cpus, hypervisor.Quantity(memMiB), c, p, hypervisor.Quantity(m), ctx.Err())
			}
			return err
		}
	}
	return nil
}

func (q *VM) setMemory(ctx context.Context, memMiB int64) error {
	if !q.spec.MemoryHotplug() {
		return nil
	}
	want := (memMiB - q.spec.MemoryMiB) << 20
	if err := q.qmpRun("qom-set", map[string]any{"path": "/machine/peripheral/" + qemuargs.VirtioMemID, "property": "requested-size", "value": want}, nil); err != nil {
		return err
	}
	return q.await(ctx, func(_, _ int32, m int64) bool { return m == memMiB })
}

// setCPUs adds vCPUs in the lowest free sockets and removes the highest hot-pluggable ones,
// waiting for the guest's acknowledgement of each insertion and for each removal to complete.
func (q *VM) setCPUs(ctx context.Context, target int32) error {
	for {
		slots, _, err := q.cpus()
		if err != nil {
			return err
		}
		var plugged, free []hotCPU
		for _, s := range slots {
			if s.QOMPath != "" {
				plugged = append(plugged, s)
			} else {
				free = append(free, s)
			}
		}
		switch {
		case len(plugged) < int(target) && len(free) > 0:
			s := free[0]
			id := qemuargs.CPUDeviceID(s.socket())
			args := map[string]any{"driver": s.Type, "id": id}
			for k, v := range s.Props {
				args[k] = v
			}
			q.resizeMu.Lock()
			if q.spec.Acceleration == "tcg" && q.unplugged {
				q.resizeMu.Unlock()
				return fmt.Errorf("%w: cpus: under tcg QEMU %s crashes adding a vCPU after one was removed; restart the VM to add vCPUs again (kvm is not affected)", hypervisor.ErrRefused, q.version)
			}
			q.hotAdded[id] = true
			q.resizeMu.Unlock()
			if err := q.qmpRun("device_add", args, nil); err != nil {
				return err
			}
			n := int32(len(plugged) + 1)
			if err := q.await(ctx, func(c, p int32, _ int64) bool { return p == n && c == n }); err != nil {
				return err
			}
		case len(plugged) > int(target):
			id := plugged[len(plugged)-1].id()
			if id == "" {
				return fmt.Errorf("vCPU in socket %d has no device id and cannot be unplugged", plugged[len(plugged)-1].socket())
			}
			// A repeated device_del while the guest ejects is refused; the wait sees it through.
			if err := q.qmpRun("device_del", map[string]any{"id": id}, nil); err != nil && !strings.Contains(err.Error(), "in progress") {
				return err
			}
			q.resizeMu.Lock()
			q.unplugged = true
			q.resizeMu.Unlock()
			n := int32(len(plugged) - 1)
			if err := q.await(ctx, func(_, p int32, _ int64) bool { return p == n }); err != nil {
				return err
			}
		default:
			// Done, unless a vCPU the guest has not acknowledged is left: wait for it.
			return q.await(ctx, func(c, p int32, _ int64) bool { return c == p })
		}
	}
}

// await polls the guest's state until done accepts it or ctx ends.
func (q *VM) await(ctx context.Context, done func(acked, plugged int32, memMiB int64) bool) error {
	for {
		c, p, m, err := q.state()
		if err != nil {
			return err
		}
		if done(c, p, m) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(resizePoll):
		}
	}
}

var _ hypervisor.Resizer = (*VM)(nil)
