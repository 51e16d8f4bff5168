package qemu

import (
	"context"
	"slices"
	"strings"

	"github.com/virtpod/virtpod/pkg/controlapi"
	qemuargs "github.com/virtpod/virtpod/pkg/qemu"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// CPUSeconds is QEMU's CPU time, once it runs: QMP is connected only after the process started.
func (q *VM) CPUSeconds() (float64, error) {
	if q.ctl.Load() == nil {
		return 0, hypervisor.ErrNotRunning
	}
	return q.proc.CPUSeconds()
}

// blockStats is one entry of QMP's query-blockstats: a block backend by its drive id (driveOf), and what
// QEMU's block layer counted of the guest's requests on it.
type blockStats struct {
	Device string `json:"device"`
	Qdev   string `json:"qdev"`
	Stats  struct {
		RdBytes      int64 `json:"rd_bytes"`
		WrBytes      int64 `json:"wr_bytes"`
		RdOperations int64 `json:"rd_operations"`
		WrOperations int64 `json:"wr_operations"`
	} `json:"stats"`
}

// DiskStats are the guest's virtio disks' counters from query-blockstats.
func (q *VM) DiskStats(context.Context) ([]controlapi.DiskStats, error) {
	var raw []blockStats
	if err := q.qmpRun("query-blockstats", nil, &raw); err != nil {
		return nil, err
	}
	return diskStats(q.drives(), raw), nil
}

// drives are the guest's virtio disks' drive ids, in the guest's order: the root disk, the
// cloud-init seed, the data disks (pkg/qemu names them so) but those detached from their hotplug
// slots, then the disks attached to the running guest, by slot.
func (q *VM) drives() []string {
	d := []string{"root"}
	if q.spec.SeedPath != "" {
		d = append(d, "cidata")
	}
	on := q.onSlots()
	for _, disk := range q.spec.Disks {
		if !disk.Hotplug || slices.Contains(on, disk.Serial) {
			d = append(d, qemuargs.DriveID(disk.Serial))
		}
	}
	for _, name := range on {
		if _, boot := q.bootDrive(name); !boot {
			d = append(d, qemuargs.DriveID(name))
		}
	}
	return d
}

// driveOf is the drive a block backend is: its name for a -drive; QEMU names the backend of a
// device over a blockdev-add'ed node "", and gives its device's path
// (/machine/peripheral/vd-<name>/virtio-backend), which names the disk.
func driveOf(device, qdev string) string {
	if device != "" {
		return device
	}
	id := strings.TrimSuffix(strings.TrimPrefix(qdev, "/machine/peripheral/"), "/virtio-backend")
	if name, ok := strings.CutPrefix(id, "vd-"); ok && !strings.Contains(name, "/") {
		return qemuargs.DriveID(name)
	}
	return ""
}

// diskStats picks the guest's drives out of query-blockstats, in drives' order: QEMU also lists
// backends the guest does not see as a disk (firmware flash, a migration's NBD exports and
// mirror targets), and a drive it does not list is left out.
func diskStats(drives []string, raw []blockStats) []controlapi.DiskStats {
	byID := make(map[string]blockStats, len(raw))
	for _, b := range raw {
		if d := driveOf(b.Device, b.Qdev); d != "" {
			byID[d] = b
		}
	}
	var out []controlapi.DiskStats
	for _, d := range drives {
		b, ok := byID[d]
		if !ok {
			continue
		}
		out = append(out, controlapi.DiskStats{Drive: d, ReadBytes: b.Stats.RdBytes, WriteBytes: b.Stats.WrBytes,
			ReadOps: b.Stats.RdOperations, WriteOps: b.Stats.WrOperations})
	}
	return out
}

var _ hypervisor.Meter = (*VM)(nil)
