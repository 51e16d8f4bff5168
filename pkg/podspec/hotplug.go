package podspec

import (
	"slices"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// withHotplugSlots puts each hotpluggable disk of the spec on one of a qemu guest's hotplug slots
// (RunnerConfig gives it vmv1.HotplugSlots; docs/hotplug.md): the slot status.disks gives it, so
// a guest that resumes or restarts after a hotplug finds each disk where it was, else the lowest
// free one, in the spec's order.
func withHotplugSlots(vm *vmv1.VirtualMachine, cfg *runnerconfig.Config) {
	if cfg.HotplugSlots == 0 {
		return
	}
	slots := DiskSlots(vm.Spec.Guest.HotplugDisks(), KnownSlots(vm.Status.Disks))
	for i := range cfg.Disks {
		if slot, ok := slots[cfg.Disks[i].Name]; ok {
			cfg.Disks[i].Hotplug, cfg.Disks[i].Slot = true, slot
		}
	}
}

// KnownSlots are the slots status.disks records, by disk.
func KnownSlots(disks []vmv1.HotplugDiskStatus) map[string]int {
	known := map[string]int{}
	for _, d := range disks {
		known[d.Name] = int(d.Slot)
	}
	return known
}

// DiskSlots puts each of disks on a slot: the one known gives it when no disk before it took
// that slot, else the lowest slot free of known's and the others'. Disks beyond the slots get
// none (the API allows no more than there are). Pure.
func DiskSlots(disks []vmv1.Disk, known map[string]int) map[string]int {
	out := map[string]int{}
	taken := make([]bool, vmv1.HotplugSlots)
	for _, d := range disks {
		if s, ok := known[d.Name]; ok && s >= 0 && s < len(taken) && !taken[s] {
			out[d.Name], taken[s] = s, true
		}
	}
	// A free slot is one no disk of disks holds and known gives to no other disk: a disk being
	// detached still holds its slot in the guest.
	held := map[int]bool{}
	for name, s := range known {
		if !slices.ContainsFunc(disks, func(d vmv1.Disk) bool { return d.Name == name }) {
			held[s] = true
		}
	}
	for _, d := range disks {
		if _, ok := out[d.Name]; ok {
			continue
		}
		for s := range taken {
			if !taken[s] && !held[s] {
				out[d.Name], taken[s] = s, true
				break
			}
		}
	}
	return out
}
