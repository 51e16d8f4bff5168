package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Disk hotplug (docs/hotplug.md): a data disk marked hotpluggable sits on one of the guest's
// hotplug slots (a PCIe root port each), so it can join and leave the running guest. A disk added
// to a running VM's spec is served by an attachment pod on the guest's node, which mounts its
// source and serves it over NBD on a unix socket in its control directory; the node agent links
// that socket into the runner's control directory and asks the runner to attach it (QMP
// blockdev-add and device_add). A disk removed from the spec is detached: the guest is asked to
// release it (device_del) and the runner waits for the guest's answer. At the next start every
// hotpluggable disk of the spec is an ordinary volume of the new runner pod, on its slot.

// HotplugSlots is how many hotplug slots a qemu guest has: at most this many hotpluggable disks.
const HotplugSlots = 4

// DiskState is where a hotpluggable disk is in its life in the running guest.
type DiskState string

// Hotpluggable disk states.
const (
	// DiskAttaching: the spec names the disk and the guest does not have it yet.
	DiskAttaching DiskState = "Attaching"
	// DiskAttached: the guest has the disk.
	DiskAttached DiskState = "Attached"
	// DiskDetaching: the spec no longer names the disk and the guest has not released it yet.
	DiskDetaching DiskState = "Detaching"
)

// HotplugDiskStatus is one hotpluggable disk of the running guest.
type HotplugDiskStatus struct {
	// name of the disk (its serial).
	Name string `json:"name"`
	// state: Attaching, Attached or Detaching.
	State DiskState `json:"state"`
	// slot is the hotplug slot the disk has in the guest (0 to 3).
	Slot int32 `json:"slot"`
	// attachmentPod is the pod that serves the disk to the guest, once it runs, when the disk
	// was added to the running guest; empty for a disk the runner pod has held since the guest
	// started.
	// +optional
	AttachmentPod string `json:"attachmentPod,omitempty"`
	// readOnly: the guest cannot write the disk.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
	// message says what the disk waits for, or why it cannot be attached or detached.
	// +optional
	Message string `json:"message,omitempty"`
}

// Hotplug annotations and labels.
const (
	// AnnotationHotplug, on the runner pod, written by the controller: a digest of the VM's
	// status.disks as the guest should have them. A new value asks the node agent to bring the
	// guest there; the agent reads what to do from the VM's status, which only the controller
	// writes.
	AnnotationHotplug = "vm.virtpod.io/hotplug"
	// AnnotationHotplugResult, on the runner pod, written by the node agent: the JSON of
	// controlapi.HotplugResult, what the guest has now, for the digest it answers.
	AnnotationHotplugResult = "vm.virtpod.io/hotplug-result"
	// LabelAttachmentOf is on an attachment pod: the name of the VM whose guest it serves a disk
	// to. LabelAttachedDisk names that disk, and LabelAttachedTo the runner pod's UID.
	LabelAttachmentOf = "vm.virtpod.io/attachment-of"
	LabelAttachedDisk = "vm.virtpod.io/attached-disk"
	LabelAttachedTo   = "vm.virtpod.io/attached-to"
	// AttachmentContainer is the attachment pod's one container.
	AttachmentContainer = "disk"
)

// HotplugDisks are the guest's hotpluggable disks, in the spec's order.
func (g *GuestSpec) HotplugDisks() []Disk {
	var out []Disk
	for _, d := range g.Disks {
		if d.Hotplug {
			out = append(out, d)
		}
	}
	return out
}

// HotplugDigest is the value of AnnotationHotplug for status.disks: a digest of what the guest
// should have (each disk's name, state, slot, attachment pod and read-only flag). The node agent
// acts on a runner pod's annotation only when the VM's status it reads gives the same digest, so
// it never carries out an older status than the one the controller asked for.
func HotplugDigest(disks []HotplugDiskStatus) string {
	h := sha256.New()
	for _, d := range disks {
		fmt.Fprintf(h, "%s\x00%s\x00%d\x00%s\x00%t\n", d.Name, d.State, d.Slot, d.AttachmentPod, d.ReadOnly)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Reasons of the hotplug events, on the VM.
const (
	// EventDiskAttached: the guest has the disk (status.disks state Attached).
	EventDiskAttached = "DiskAttached"
	// EventDiskDetached: the guest released the disk, which left status.disks.
	EventDiskDetached = "DiskDetached"
	// EventDiskHotplugFailed: an attachment pod could not be made, or the runner could not
	// attach the disk, or the guest has not released it in time; the message says which, and
	// the controller and the node agent try again.
	EventDiskHotplugFailed = "DiskHotplugFailed"
)
