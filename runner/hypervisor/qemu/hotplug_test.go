package qemu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// slotQEMU is a QMP server with QEMU's hotplug answers: device_del is answered at once, and the
// guest releases the device (DEVICE_DELETED) unless it is stubborn, in which case a second
// device_del is refused as QEMU refuses it; a blockdev-add of node disk-nonbd and a device_add of
// id vd-nodev fail. It records every command.
type slotQEMU struct {
	mu       sync.Mutex
	cmds     []string // execute, and its arguments' JSON
	stubborn map[string]bool
	pending  map[string]bool
	conn     net.Conn
}

func (f *slotQEMU) serve(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conn = c
		f.mu.Unlock()
		fmt.Fprintf(c, `{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": ""}, "capabilities": []}}`+"\n")
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			var cmd struct {
				Execute   string
				Arguments map[string]any
			}
			_ = json.Unmarshal(line, &cmd)
			f.mu.Lock()
			fmt.Fprint(c, f.answer(cmd.Execute, cmd.Arguments)+"\n")
			f.mu.Unlock()
		}
	}()
	return path
}

func (f *slotQEMU) answer(cmd string, args map[string]any) string {
	if cmd == "qmp_capabilities" {
		return `{"return": {}}`
	}
	a, _ := json.Marshal(args)
	f.cmds = append(f.cmds, cmd+" "+string(a))
	id, _ := args["id"].(string)
	switch {
	case cmd == "device_del" && f.pending[id]:
		return fmt.Sprintf(`{"error": {"class": "GenericError", "desc": "Device %s is already in the process of unplug"}}`, id)
	case cmd == "device_del" && f.stubborn[id]:
		f.pending[id] = true
	case cmd == "device_del":
		return `{"return": {}}` + "\n" + deletedEvent(id)
	case cmd == "blockdev-add" && args["node-name"] == "disk-nonbd":
		return `{"error": {"class": "GenericError", "desc": "Failed to connect to 'hotplug-nonbd.sock': No such file or directory"}}`
	case cmd == "device_add" && id == "vd-nodev":
		return `{"error": {"class": "GenericError", "desc": "Bus 'hp3' does not support hotplugging"}}`
	}
	return `{"return": {}}`
}

func deletedEvent(id string) string {
	return fmt.Sprintf(`{"event": "DEVICE_DELETED", "data": {"path": "/machine/peripheral/%s/virtio-backend"}, "timestamp": {"seconds": 1, "microseconds": 2}}`+"\n"+
		`{"event": "DEVICE_DELETED", "data": {"device": %q, "path": "/machine/peripheral/%s"}, "timestamp": {"seconds": 1, "microseconds": 3}}`, id, id, id)
}

// release has the stubborn guest let go of id at last.
func (f *slotQEMU) release(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprint(f.conn, deletedEvent(id)+"\n")
	delete(f.pending, id)
}

// took returns the commands since the last call.
func (f *slotQEMU) took() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.cmds
	f.cmds = nil
	return c
}

// slotVM is a driver connected to f, for a guest with four slots and its disk boot on slot 0.
func slotVM(t *testing.T, f *slotQEMU) *VM {
	q := New("qemu", nil, hypervisor.Machine{
		Name: "vm", Acceleration: "tcg", GuestSize: vmv1.GuestSize{CPUs: 1, MemoryMiB: 256}, HotplugSlots: 4,
		Disks: []hypervisor.Disk{{Serial: "boot", Path: "/disks/boot/disk.img", Format: "raw", Direct: true, Hotplug: true}, {Serial: "fixed", Path: "/disks/fixed/disk.img", Format: "raw"}},
	}, zaptest.NewLogger(t))
	mon, err := dialMonitor(f.serve(t), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mon.Disconnect() })
	q.ctl.Store(mon)
	evs, _ := mon.Events(t.Context())
	go q.translate(evs)
	return q
}

func states(st controlapi.HotplugStatus) string {
	var s []string
	for _, d := range st.Disks {
		s = append(s, fmt.Sprintf("%s@%d:%s", d.Name, d.Slot, d.State))
	}
	return strings.Join(s, " ")
}

func hasCommand(cmds []string, prefix string) bool {
	return slices.ContainsFunc(cmds, func(c string) bool { return strings.HasPrefix(c, prefix) })
}

// TestHotplugConverges: a disk served over NBD is attached on its slot and detached once the
// guest released it, its node then deleted; the boot disk leaves (its -drive goes with its
// device) and comes back from its own file; failures leave nothing behind and name the disk.
func TestHotplugConverges(t *testing.T) {
	f := &slotQEMU{stubborn: map[string]bool{}, pending: map[string]bool{}}
	q := slotVM(t, f)
	ctx := t.Context()
	boot := controlapi.HotplugDisk{Name: "boot", Slot: 0}
	hot := controlapi.HotplugDisk{Name: "hot", Slot: 1, Socket: controlapi.HotplugSocket("hot"), ReadOnly: true}
	if st, err := q.Hotplugged(ctx); err != nil || states(st) != "boot@0:attached" {
		t.Fatalf("at start: %+v, %v", st, err)
	}
	st, err := q.Hotplug(ctx, "/ctl", controlapi.HotplugRequest{Disks: []controlapi.HotplugDisk{hot, boot}})
	cmds := f.took()
	if err != nil || st.Error != "" || states(st) != "boot@0:attached hot@1:attached" || len(cmds) != 2 ||
		cmds[0] != `blockdev-add {"driver":"raw","file":{"driver":"nbd","export":"hot","reconnect-delay":5,"server":{"path":"/ctl/hotplug-hot.sock","type":"unix"}},"node-name":"disk-hot","read-only":true}` ||
		cmds[1] != `device_add {"bus":"hp1","drive":"disk-hot","driver":"virtio-blk-pci","id":"vd-hot","serial":"hot"}` {
		t.Fatalf("attach over NBD: %+v, %v, commands %q", st, err, cmds)
	}
	if d := q.drives(); !slices.Equal(d, []string{"root", "disk-boot", "disk-fixed", "disk-hot"}) {
		t.Errorf("drives %q", d)
	}
	st, err = q.Hotplug(ctx, "/ctl", controlapi.HotplugRequest{Disks: []controlapi.HotplugDisk{boot}})
	cmds = f.took()
	if err != nil || st.Error != "" || states(st) != "boot@0:attached" || !slices.Equal(cmds, []string{`device_del {"id":"vd-hot"}`, `blockdev-del {"node-name":"disk-hot"}`}) {
		t.Fatalf("detach: %+v, %v, commands %q", st, err, cmds)
	}

	f.stubborn["vd-boot"] = true
	st, _ = q.Hotplug(ctx, "/ctl", controlapi.HotplugRequest{ReleaseSeconds: 1})
	if states(st) != "boot@0:detaching" || !strings.Contains(st.Disks[0].Error, "has not released the disk in 1s") || !strings.Contains(st.Error, "disk boot:") {
		t.Fatalf("a guest that does not release: %+v", st)
	}
	st, _ = q.Hotplug(ctx, "/ctl", controlapi.HotplugRequest{ReleaseSeconds: 1})
	if cmds = f.took(); len(cmds) != 1 || states(st) != "boot@0:detaching" {
		t.Fatalf("asked again: commands %q (device_del once only), %+v", cmds, st)
	}
	f.release("vd-boot")
	time.Sleep(50 * time.Millisecond)
	if st, _ = q.Hotplugged(ctx); states(st) != "" {
		t.Errorf("released late: %+v", st)
	}
	if d := q.drives(); !slices.Equal(d, []string{"root", "disk-fixed"}) {
		t.Errorf("drives without the boot disk %q", d)
	}

	st, err = q.Hotplug(ctx, "/ctl", controlapi.HotplugRequest{Disks: []controlapi.HotplugDisk{{Name: "boot", Slot: 2}}})
	cmds = f.took()
	if err != nil || st.Error != "" || states(st) != "boot@2:attached" || len(cmds) != 2 || strings.HasPrefix(cmds[0], "blockdev-del") ||
		cmds[0] != `blockdev-add {"cache":{"direct":true,"no-flush":false},"discard":"unmap","driver":"raw","file":{"aio":"threads","cache":{"direct":true,"no-flush":false},"driver":"file","filename":"/disks/boot/disk.img"},"node-name":"disk-boot","read-only":false}` {
		t.Fatalf("the boot disk back from its file: %+v, %v, commands %q", st, err, cmds)
	}

	st, err = q.Hotplug(ctx, "/ctl", controlapi.HotplugRequest{Disks: []controlapi.HotplugDisk{
		{Name: "boot", Slot: 2}, {Name: "nodev", Slot: 3, Socket: "hotplug-nodev.sock"}, {Name: "nonbd", Slot: 1, Socket: "hotplug-nonbd.sock"}, {Name: "stray", Slot: 0},
		{Name: "fixed", Slot: 0, Socket: "hotplug-fixed.sock"},
	}})
	cmds = f.took()
	if err != nil || states(st) != "boot@2:attached" || !hasCommand(cmds, `blockdev-del {"node-name":"disk-nodev"}`) || hasCommand(cmds, `device_add {"bus":"hp1"`) ||
		!strings.Contains(st.Error, "disk nodev: QMP device_add: Bus 'hp3' does not support hotplugging") || !strings.Contains(st.Error, "disk nonbd: no NBD export nonbd on hotplug-nonbd.sock") ||
		!strings.Contains(st.Error, "disk stray: no socket given, and the runner pod was not started with the disk") ||
		!strings.Contains(st.Error, "disk fixed: the guest has the disk from its start, not on a hotplug slot") || hasCommand(cmds, `blockdev-add {"discard":"unmap","driver":"raw","file":{"driver":"nbd","export":"fixed"`) {
		t.Fatalf("failures: %+v, %v, commands %q", st, err, cmds)
	}
}

// TestHotplugRefusals: nothing is asked of QEMU before it runs.
func TestHotplugRefusals(t *testing.T) {
	q := New("qemu", nil, hypervisor.Machine{}, zaptest.NewLogger(t))
	if _, err := q.Hotplug(t.Context(), "/ctl", controlapi.HotplugRequest{}); err != hypervisor.ErrNotRunning {
		t.Errorf("before QMP: %v", err)
	}
	if _, err := q.Hotplugged(t.Context()); err != hypervisor.ErrNotRunning {
		t.Errorf("GET before QMP: %v", err)
	}
}

// TestDriveOf: a -drive's backend by its name; a hotplugged disk's (QEMU names it "") by its
// device; anything else is no drive.
func TestDriveOf(t *testing.T) {
	for _, c := range [][3]string{
		{"disk-data", "/machine/peripheral/vd-data/virtio-backend", "disk-data"},
		{"", "/machine/peripheral/vd-hot/virtio-backend", "disk-hot"},
		{"", "/machine/peripheral-anon/device[2]/virtio-backend", ""},
		{"", "/machine/peripheral/vd-a/b/virtio-backend", ""},
		{"", "", ""},
	} {
		if got := driveOf(c[0], c[1]); got != c[2] {
			t.Errorf("driveOf(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}
