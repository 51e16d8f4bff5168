package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/virtpod/virtpod/pkg/qemu"
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

// qmpRun runs one QMP command and decodes its return value into out.
func (q *qemuVM) qmpRun(cmd string, args, out any) error {
	mon := q.ctl.Load()
	if mon == nil {
		return errNotRunning
	}
	select {
	case <-q.exited:
		return errNotRunning
	default:
	}
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, _ := json.Marshal(req)
	res, err := mon.Run(b)
	if err != nil {
		return fmt.Errorf("QMP %s: %w", cmd, err)
	}
	if out == nil {
		return nil
	}
	var r struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return fmt.Errorf("QMP %s: %w", cmd, err)
	}
	return json.Unmarshal(r.Return, out)
}

// cpus lists the vCPU slots and which hot-added ones the guest acknowledged.
func (q *qemuVM) cpus() (slots []hotCPU, acked map[string]bool, err error) {
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
func (q *qemuVM) onlineCPUs(slots []hotCPU, acked map[string]bool) int32 {
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

func (q *qemuVM) pluggedMemMiB() (int64, error) {
	if !q.spec.MemoryHotplug() {
		return 0, nil
	}
	var size int64
	err := q.qmpRun("qom-get", map[string]any{"path": "/machine/peripheral/" + qemu.VirtioMemID, "property": "size"}, &size)
	return size >> 20, err
}

func (q *qemuVM) guestSize(context.Context) (int32, int64, error) {
	cpus, _, mem, err := q.state()
	return cpus, mem, err
}

// state is the acknowledged and plugged vCPU counts and the guest's memory.
func (q *qemuVM) state() (acked, plugged int32, memMiB int64, err error) {
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

func (q *qemuVM) resize(ctx context.Context, cpus int32, memMiB int64) error {
	if q.spec.MemoryHotplug() {
		want := (memMiB - q.spec.MemoryMiB) << 20
		if err := q.qmpRun("qom-set", map[string]any{"path": "/machine/peripheral/" + qemu.VirtioMemID, "property": "requested-size", "value": want}, nil); err != nil {
			return err
		}
	}
	if err := q.plugCPUs(cpus); err != nil {
		return err
	}
	for {
		c, plugged, m, err := q.state()
		if err != nil {
			return err
		}
		if c == cpus && plugged == cpus && m == memMiB {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the guest took %d vCPUs (%d plugged) and %s of %d and %s in time: %w",
				c, plugged, quantity(m), cpus, quantity(memMiB), ctx.Err())
		case <-time.After(resizePoll):
		}
	}
}

// plugCPUs asks for the target count: new vCPUs in the lowest free sockets, removals from the
// highest hot-pluggable ones. Removal completes when the guest ejects the vCPU.
func (q *qemuVM) plugCPUs(target int32) error {
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
	for i := 0; i < int(target)-len(plugged) && i < len(free); i++ {
		s := free[i]
		args := map[string]any{"driver": s.Type, "id": qemu.CPUDeviceID(s.socket())}
		for k, v := range s.Props {
			args[k] = v
		}
		q.resizeMu.Lock()
		q.hotAdded[qemu.CPUDeviceID(s.socket())] = true
		q.resizeMu.Unlock()
		if err := q.qmpRun("device_add", args, nil); err != nil {
			return err
		}
	}
	for i := len(plugged) - 1; i >= 0 && len(plugged)-i <= len(plugged)-int(target); i-- {
		id := plugged[i].id()
		if id == "" {
			continue // the boot CPU
		}
		// A repeated device_del while the guest ejects is refused; the wait sees it through.
		if err := q.qmpRun("device_del", map[string]any{"id": id}, nil); err != nil && !strings.Contains(err.Error(), "in progress") {
			return err
		}
	}
	return nil
}

var _ resizer = (*qemuVM)(nil)
