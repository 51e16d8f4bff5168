package controlapi

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
)

// HotplugPath is the guest's hotplug slots: GET answers HotplugStatus, PUT takes a
// HotplugRequest (the slots as they should be) and answers HotplugStatus once the guest got
// there, or once a disk it was asked to release was not released in time (that disk stays
// DiskDetaching, with the reason, and a later PUT waits for it again).
const HotplugPath = "/v1/hotplug"

// HotplugRequest is every hotpluggable disk the guest should have, each on its slot. A disk the
// guest has and the request lacks is detached: the guest is asked to release it (device_del),
// and the runner waits for it at most ReleaseSeconds (0: 30 s).
type HotplugRequest struct {
	Disks          []HotplugDisk `json:"disks"`
	ReleaseSeconds int           `json:"releaseSeconds,omitempty"`
}

// HotplugDisk is one disk on a hotplug slot. Socket, when set, names the unix socket in the
// runner's control directory where an attachment pod serves the disk over NBD (export Name);
// empty means the runner pod's own volume for the disk (its --disk), which only a disk the pod
// was started with has.
type HotplugDisk struct {
	Name     string `json:"name"`
	Slot     int    `json:"slot"`
	Socket   string `json:"socket,omitempty"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Hotplugged disk states in HotplugStatus.
const (
	DiskStateAttached  = "attached"
	DiskStateDetaching = "detaching"
)

// HotplugStatus is what the guest has on its hotplug slots: each disk attached, or asked to
// leave and not released yet. Error says why the last request did not get all the way.
type HotplugStatus struct {
	Disks []HotplugDiskState `json:"disks"`
	Error string             `json:"error,omitempty"`
}

// HotplugDiskState is one disk on a hotplug slot.
type HotplugDiskState struct {
	Name  string `json:"name"`
	Slot  int    `json:"slot"`
	State string `json:"state"`
	// Error: why the disk could not be attached, or was not released.
	Error string `json:"error,omitempty"`
}

// Attached says whether the guest has disk name on a slot (detaching counts: it is still there).
func (s HotplugStatus) Attached(name string) (HotplugDiskState, bool) {
	i := slices.IndexFunc(s.Disks, func(d HotplugDiskState) bool { return d.Name == name })
	if i < 0 {
		return HotplugDiskState{}, false
	}
	return s.Disks[i], true
}

// HotplugResult is the node agent's answer on a runner pod (annotation
// vm.virtpod.io/hotplug-result): the digest of the request it carried out (the controller's
// vm.virtpod.io/hotplug) and the runner's status after it.
type HotplugResult struct {
	For    string        `json:"for"`
	Status HotplugStatus `json:"status"`
}

// HotplugSocket is the name of disk name's NBD socket in the runner's control directory.
func HotplugSocket(name string) string { return "hotplug-" + name + ".sock" }

// AttachmentSocket is the NBD socket an attachment pod serves its disk on, in its own control
// directory; the node agent links it into the runner's as HotplugSocket.
const AttachmentSocket = "disk.sock"

var diskNameRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?$`)

// Validate refuses a request the runner could not carry out as asked: bad names, slots out of
// range or taken twice, sockets that are not HotplugSocket of their disk.
func (r HotplugRequest) Validate(slots int) error {
	var errs []error
	names, taken := map[string]bool{}, map[int]bool{}
	for i, d := range r.Disks {
		f := fmt.Sprintf("disks[%d]", i)
		if !diskNameRe.MatchString(d.Name) {
			errs = append(errs, fmt.Errorf("%s.name %q: want a disk name (a DNS label of at most 20 characters)", f, d.Name))
		}
		if names[d.Name] {
			errs = append(errs, fmt.Errorf("%s.name %q: named twice", f, d.Name))
		}
		names[d.Name] = true
		if d.Slot < 0 || d.Slot >= slots {
			errs = append(errs, fmt.Errorf("%s.slot %d: the guest has slots 0 to %d", f, d.Slot, slots-1))
		} else if taken[d.Slot] {
			errs = append(errs, fmt.Errorf("%s.slot %d: taken by another disk", f, d.Slot))
		}
		taken[d.Slot] = true
		if d.Socket != "" && d.Socket != HotplugSocket(d.Name) {
			errs = append(errs, fmt.Errorf("%s.socket %q: want %q", f, d.Socket, HotplugSocket(d.Name)))
		}
	}
	if r.ReleaseSeconds < 0 || r.ReleaseSeconds > 600 {
		errs = append(errs, fmt.Errorf("releaseSeconds %d: want 0 to 600", r.ReleaseSeconds))
	}
	return errors.Join(errs...)
}
