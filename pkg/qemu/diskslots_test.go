package qemu

import (
	"slices"
	"strings"
	"testing"
)

// slotSpec is the disk guest with four hotplug slots and its data disk on slot 2.
func slotSpec() Spec {
	s := diskSpec()
	s.HotplugSlots = 4
	s.Disks[0].Hotplug, s.Disks[0].Slot = true, 2
	return s
}

// TestSlotGolden: the root ports come after every other device, then the disks on them, each
// on its port with its device id; the other disks keep their places.
func TestSlotGolden(t *testing.T) {
	hostile := slotSpec()
	hostile.Disks[0].Path = "/virtpod/disks/d,bus=pcie.0,drive=root/disk.img"
	empty := baseSpec()
	empty.HotplugSlots = 1
	for name, s := range map[string]Spec{"hotplug-slots": slotSpec(), "hostile-hotplug-disk": hostile, "hotplug-slot-empty": empty} {
		t.Run(name, func(t *testing.T) {
			args, err := Args(s)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, args)
		})
	}
}

// TestSlotsKeepOtherDevices: a guest given slots has the argv it had without, up to where the
// slots start: every other device keeps its PCI address.
func TestSlotsKeepOtherDevices(t *testing.T) {
	without := diskSpec()
	before, err := Args(without)
	if err != nil {
		t.Fatal(err)
	}
	with := without
	with.HotplugSlots = 3
	after, err := Args(with)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(after[:len(before)-1], before[:len(before)-1]) || after[len(after)-1] != "-S" {
		t.Errorf("slots changed the argv before them:\n got %q\nwant %q", after, before)
	}
	ports := strings.Join(after[len(before)-1:], " ")
	for i, id := range []string{"hp0", "hp1", "hp2"} {
		if want := "pcie-root-port,id=" + id + ",bus=pcie.0,chassis=" + string(rune('1'+i)); !strings.Contains(ports, want) {
			t.Errorf("slots %q lack %s", ports, want)
		}
	}
	if RootPortID(7) != "hp7" || DiskDeviceID("data") != "vd-data" || DriveID("data") != "disk-data" {
		t.Errorf("ids %s %s %s", RootPortID(7), DiskDeviceID("data"), DriveID("data"))
	}
}

func TestSlotsRefused(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Spec)
		want   string
	}{
		{"too many slots", func(s *Spec) { s.HotplugSlots = 17 }, "hotplug slots 17: want 0 to 16"},
		{"negative slots", func(s *Spec) { s.HotplugSlots = -1 }, "want 0 to 16"},
		{"slot beyond the last", func(s *Spec) { s.Disks[0].Slot = 4 }, "disk data: slot 4: the guest has 4 hotplug slots"},
		{"negative slot", func(s *Spec) { s.Disks[0].Slot = -1 }, "slot -1"},
		{"no slots at all", func(s *Spec) { s.HotplugSlots = 0 }, "the guest has 0 hotplug slots"},
		{"slot taken twice", func(s *Spec) { s.Disks[1].Hotplug, s.Disks[1].Slot = true, 2 }, "disk raw: slot 2 is disk data's"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := slotSpec()
			tc.mutate(&s)
			if _, err := Args(s); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Args: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
