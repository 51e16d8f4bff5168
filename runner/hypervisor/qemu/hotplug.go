package qemu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
	qemuargs "github.com/virtpod/virtpod/pkg/qemu"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// Disk hotplug (docs/hotplug.md): a disk on a hotplug slot is virtio-blk device vd-<name> on the
// slot's root port, over block node disk-<name>. Detaching asks the guest to release the device
// (device_del) and waits for QEMU's DEVICE_DELETED, which comes once the guest let go; then the
// node goes (blockdev-del; QEMU deletes a boot disk's -drive with its device). Attaching adds
// the node, from the NBD export an attachment pod serves or from the pod's own volume of a disk
// it was started with, then the device.

// defaultRelease is how long a detach waits for the guest by default; nbdReconnectSeconds is how
// long QEMU keeps the guest's I/O waiting while it reconnects a broken NBD connection.
const (
	defaultRelease      = 30 * time.Second
	nbdReconnectSeconds = 5
)

// slotDisk is a disk on a hotplug slot as the driver put it there.
type slotDisk struct {
	name, socket string // socket: its NBD socket; "" for the pod's own volume
	slot         int
	readOnly     bool
	detaching    bool   // asked to leave, not released yet
	err          string // why the last request left it as it is
	blockdev     bool   // its node was blockdev-add'ed: delete it once the device is gone
}

// slots are the disks on the guest's hotplug slots and the devices QEMU deleted.
type slots struct {
	busy  sync.Mutex // one Hotplug at a time
	mu    sync.Mutex // guards disks and gone
	disks map[string]slotDisk
	gone  map[string]chan struct{} // device id: closed on its DEVICE_DELETED
}

// hotplugRefusal is a request the driver cannot serve now.
type hotplugRefusal string

func (r hotplugRefusal) Error() string { return string(r) }
func (r hotplugRefusal) Unwrap() error { return hypervisor.ErrRefused }

// init starts with the boot disks on slots, attached.
func (s *slots) init(drives []qemuargs.Drive) {
	s.disks, s.gone = map[string]slotDisk{}, map[string]chan struct{}{}
	for _, d := range drives {
		if d.Hotplug {
			s.disks[d.Serial] = slotDisk{name: d.Serial, slot: d.Slot, readOnly: d.ReadOnly}
		}
	}
}

// deleted is QEMU's DEVICE_DELETED for device id: it wakes whoever waits for it.
func (s *slots) deleted(id string) {
	ch := s.waiter(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// waiter is closed once QEMU deleted device id.
func (s *slots) waiter(id string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.gone[id]
	if !ok {
		ch = make(chan struct{})
		s.gone[id] = ch
	}
	return ch
}

// released says whether the guest let go of disk name's device.
func (s *slots) released(name string) bool {
	select {
	case <-s.waiter(qemuargs.DiskDeviceID(name)):
		return true
	default:
		return false
	}
}

func (s *slots) put(d slotDisk) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disks[d.name] = d
}

func (s *slots) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.disks, name)
	delete(s.gone, qemuargs.DiskDeviceID(name))
}

// list is the disks by slot.
func (s *slots) list() []slotDisk {
	s.mu.Lock()
	out := make([]slotDisk, 0, len(s.disks))
	for _, d := range s.disks {
		out = append(out, d)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b slotDisk) int { return cmp.Compare(a.slot, b.slot) })
	return out
}

// Hotplugged is what the guest has on its slots; a disk the guest released is gone already.
func (q *VM) Hotplugged(context.Context) (controlapi.HotplugStatus, error) {
	if q.ctl.Load() == nil {
		return controlapi.HotplugStatus{}, hypervisor.ErrNotRunning
	}
	return q.slotStatus(nil), nil
}

// Hotplug brings the slots to req: it detaches what req lacks or moves, then attaches what the
// guest lacks. A disk that failed is in the status's error; only a refusal is an error.
func (q *VM) Hotplug(ctx context.Context, controlDir string, req controlapi.HotplugRequest) (controlapi.HotplugStatus, error) {
	if err := q.hotplugBlocked(); err != nil {
		return q.slotStatus(nil), err
	}
	q.hot.busy.Lock()
	defer q.hot.busy.Unlock()
	release := time.Duration(req.ReleaseSeconds) * time.Second
	if release == 0 {
		release = defaultRelease
	}
	errs := q.detach(ctx, q.leaving(req), release)
	for _, d := range sortedBySlot(req.Disks) {
		if err := q.attach(controlDir, d); err != nil {
			errs = append(errs, fmt.Sprintf("disk %s: %v", d.Name, err))
		}
	}
	if len(errs) > 0 {
		q.log.Warn("hotplug", zap.Strings("errors", errs))
	}
	return q.slotStatus(errs), nil
}

// hotplugBlocked refuses while QEMU does not run or a migration from here does.
func (q *VM) hotplugBlocked() error {
	select {
	case <-q.exited:
		return hypervisor.ErrNotRunning
	default:
	}
	if q.ctl.Load() == nil {
		return hypervisor.ErrNotRunning
	}
	if q.sending() {
		return hotplugRefusal("a migration of the guest is under way: attach or detach disks once it ended")
	}
	return nil
}

func sortedBySlot(disks []controlapi.HotplugDisk) []controlapi.HotplugDisk {
	out := slices.Clone(disks)
	slices.SortFunc(out, func(a, b controlapi.HotplugDisk) int { return cmp.Compare(a.Slot, b.Slot) })
	return out
}

// leaving are the disks to detach: those req lacks or has elsewhere or from another source,
// those asked to leave before and not released yet, and those the guest released by itself.
func (q *VM) leaving(req controlapi.HotplugRequest) []slotDisk {
	var out []slotDisk
	for _, d := range q.hot.list() {
		i := slices.IndexFunc(req.Disks, func(w controlapi.HotplugDisk) bool { return w.Name == d.name })
		if i < 0 || d.detaching || q.hot.released(d.name) || !q.same(d, req.Disks[i]) {
			out = append(out, d)
		}
	}
	return out
}

// same says whether disk d on its slot is what w asks for.
func (q *VM) same(d slotDisk, w controlapi.HotplugDisk) bool {
	return d.slot == w.Slot && d.socket == w.Socket && d.readOnly == q.readOnly(w)
}

// readOnly is how w is attached: read-only when asked, or when the pod holds it read-only.
func (q *VM) readOnly(w controlapi.HotplugDisk) bool {
	if b, ok := q.bootDrive(w.Name); ok && w.Socket == "" {
		return w.ReadOnly || b.ReadOnly
	}
	return w.ReadOnly
}

func (q *VM) bootDrive(name string) (qemuargs.Drive, bool) {
	i := slices.IndexFunc(q.spec.Disks, func(d qemuargs.Drive) bool { return d.Serial == name })
	if i < 0 {
		return qemuargs.Drive{}, false
	}
	return q.spec.Disks[i], true
}

// detach asks the guest to release each disk (once: QEMU refuses a second device_del while one
// is pending), then waits up to release for all of them, and drops the nodes of those released.
func (q *VM) detach(ctx context.Context, disks []slotDisk, release time.Duration) []string {
	var errs []string
	for i, d := range disks {
		if err := q.askRelease(&disks[i]); err != nil {
			d.err = fmt.Sprintf("detaching: %v", err)
			q.hot.put(d)
			errs = append(errs, fmt.Sprintf("disk %s: %s", d.name, d.err))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, release)
	defer cancel()
	for _, d := range disks {
		if !d.detaching {
			continue
		}
		select {
		case <-q.hot.waiter(qemuargs.DiskDeviceID(d.name)):
			if err := q.dropReleased(d); err != nil {
				errs = append(errs, fmt.Sprintf("disk %s: %v", d.name, err))
			}
			continue
		case <-ctx.Done():
		case <-q.exited:
		}
		d.err = fmt.Sprintf("the guest has not released the disk in %s: does its kernel support PCIe hotplug, and is the disk still mounted or in use? It stays %s; a later request waits for it again", release, controlapi.DiskStateDetaching)
		q.hot.put(d)
		errs = append(errs, fmt.Sprintf("disk %s: %s", d.name, d.err))
	}
	return errs
}

// askRelease sends device_del for d unless it was sent already; d is then detaching.
func (q *VM) askRelease(d *slotDisk) error {
	id := qemuargs.DiskDeviceID(d.name)
	if d.detaching || q.hot.released(d.name) {
		d.detaching = true
		return nil
	}
	q.hot.waiter(id) // before device_del, so its event has a place to land
	switch err := q.qmpRun("device_del", map[string]any{"id": id}, nil); {
	case err == nil, strings.Contains(err.Error(), "in the process of unplug"):
	case strings.Contains(err.Error(), "not found"):
		q.hot.deleted(id) // gone already
	default:
		return err
	}
	d.detaching, d.err = true, ""
	q.hot.put(*d)
	q.log.Info("hotplug: asked the guest to release a disk", zap.String("disk", d.name), zap.Int("slot", d.slot))
	return nil
}

// dropReleased forgets a disk the guest released, deleting the node it was attached over.
func (q *VM) dropReleased(d slotDisk) error {
	q.hot.remove(d.name)
	q.log.Info("hotplug: the guest released a disk", zap.String("disk", d.name), zap.Int("slot", d.slot))
	if !d.blockdev {
		return nil
	}
	if err := q.qmpRun("blockdev-del", map[string]any{"node-name": qemuargs.DriveID(d.name)}, nil); err != nil {
		return fmt.Errorf("released by the guest, but its block node stays open: %w", err)
	}
	return nil
}

// attach puts w on its slot unless the guest has it there already.
func (q *VM) attach(controlDir string, w controlapi.HotplugDisk) error {
	if b, ok := q.bootDrive(w.Name); ok && !b.Hotplug {
		return errors.New("the guest has the disk from its start, not on a hotplug slot: it comes and goes with a restart")
	}
	for _, d := range q.hot.list() {
		switch {
		case d.name == w.Name && !d.detaching && q.same(d, w):
			return nil
		case d.name == w.Name:
			return errors.New("the guest has not released it from its earlier slot yet; it is attached once it has")
		case d.slot == w.Slot:
			return fmt.Errorf("slot %d still holds disk %s, which the guest has not released yet", w.Slot, d.name)
		}
	}
	node, err := q.nodeOf(controlDir, w)
	if err != nil {
		return err
	}
	id, drive := qemuargs.DiskDeviceID(w.Name), qemuargs.DriveID(w.Name)
	if err := q.qmpRun("blockdev-add", node, nil); err != nil {
		if w.Socket != "" {
			return fmt.Errorf("no NBD export %s on %s: %w", w.Name, w.Socket, err)
		}
		return err
	}
	q.hot.remove(w.Name) // a new device under the old id: forget its earlier deletion
	err = q.qmpRun("device_add", map[string]any{"driver": "virtio-blk-pci", "id": id, "bus": qemuargs.RootPortID(w.Slot), "drive": drive, "serial": w.Name}, nil)
	if err != nil {
		if derr := q.qmpRun("blockdev-del", map[string]any{"node-name": drive}, nil); derr != nil {
			q.log.Warn("hotplug: dropping the node of a disk QEMU did not add", zap.String("disk", w.Name), zap.Error(derr))
		}
		return err
	}
	q.hot.put(slotDisk{name: w.Name, socket: w.Socket, slot: w.Slot, readOnly: q.readOnly(w), blockdev: true})
	q.log.Info("hotplug: attached a disk", zap.String("disk", w.Name), zap.Int("slot", w.Slot), zap.String("socket", w.Socket))
	return nil
}

// nodeOf is the blockdev-add of w's node: an NBD client of its socket in controlDir, or the pod's
// own volume of a disk it was started with, opened as its -drive was.
func (q *VM) nodeOf(controlDir string, w controlapi.HotplugDisk) (map[string]any, error) {
	ro := q.readOnly(w)
	node := map[string]any{"driver": "raw", "node-name": qemuargs.DriveID(w.Name), "read-only": ro}
	if !ro {
		node["discard"] = "unmap"
	}
	if w.Socket != "" {
		node["file"] = map[string]any{"driver": "nbd", "export": w.Name, "reconnect-delay": nbdReconnectSeconds,
			"server": map[string]any{"type": "unix", "path": filepath.Join(controlDir, w.Socket)}}
		return node, nil
	}
	b, ok := q.bootDrive(w.Name)
	if !ok || !b.Hotplug {
		return nil, fmt.Errorf("no socket given, and the runner pod was not started with the disk on a slot: serve it over NBD on %s", controlapi.HotplugSocket(w.Name))
	}
	cache := map[string]any{"direct": b.Cache == qemuargs.CacheNone, "no-flush": false}
	driver := "file"
	if b.Block {
		driver = "host_device"
	}
	node["driver"], node["cache"] = b.Format, cache
	node["file"] = map[string]any{"driver": driver, "filename": b.Path, "aio": "threads", "cache": cache}
	return node, nil
}

// slotStatus is the slots as the guest has them, with errs.
func (q *VM) slotStatus(errs []string) controlapi.HotplugStatus {
	st := controlapi.HotplugStatus{Disks: []controlapi.HotplugDiskState{}, Error: strings.Join(errs, "; ")}
	for _, d := range q.hot.list() {
		if q.hot.released(d.name) {
			continue
		}
		s := controlapi.HotplugDiskState{Name: d.name, Slot: d.slot, State: controlapi.DiskStateAttached, Error: d.err}
		if d.detaching {
			s.State = controlapi.DiskStateDetaching
		}
		st.Disks = append(st.Disks, s)
	}
	return st
}

// onSlots are the names of the disks on slots now, by slot.
func (q *VM) onSlots() []string {
	var names []string
	for _, d := range q.hot.list() {
		if !q.hot.released(d.name) {
			names = append(names, d.name)
		}
	}
	return names
}
