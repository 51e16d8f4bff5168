package podspec_test

import (
	"maps"
	"testing"

	"sigs.k8s.io/yaml"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
	goldenfile "github.com/virtpod/virtpod/tests/golden"
)

// TestHotplugGolden: a qemu guest has its hotplug slots, and each hotpluggable disk of the spec
// sits on the slot status.disks gives it (here the guest had "logs" on slot 2 before it
// restarted), the others on the lowest free slots, in the spec's order.
func TestHotplugGolden(t *testing.T) {
	vm, opts := suspendableVM()
	vm.Spec.Guest.Disks = append(vm.Spec.Guest.Disks,
		vmv1.Disk{Name: "config", Hotplug: true, ConfigMap: &vmv1.ConfigMapDiskSource{Name: "web-config"}},
		vmv1.Disk{Name: "logs", Hotplug: true, PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "web-logs"}},
	)
	opts.Claims["web-logs"] = podspec.Claim{SizeMiB: 2048}
	vm.Status.Disks = []vmv1.HotplugDiskStatus{{Name: "logs", State: vmv1.DiskAttached, Slot: 2, AttachmentPod: "web-hp-logs"}}
	pod := podspec.Build(vm, opts)
	cfg, err := runnerconfigtest.Parse(pod.Spec.Containers[0].Args)
	if err != nil {
		t.Fatalf("the runner refuses the flags: %v", err)
	}
	slots := map[string]int{}
	for _, d := range cfg.Disks {
		if d.Hotplug {
			slots[d.Name] = d.Slot
		}
	}
	if want := map[string]int{"config": 0, "logs": 2}; cfg.HotplugSlots != vmv1.HotplugSlots || !maps.Equal(slots, want) {
		t.Errorf("%d slots, disks on %v; want %d, %v", cfg.HotplugSlots, slots, vmv1.HotplugSlots, want)
	}
	got, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	goldenfile.Check(t, "hotplug-disks.golden.yaml", got)
}

// TestDiskSlots: known slots are kept, a slot held by a disk on its way out is not given away,
// a clash goes to the first disk, and the rest take the lowest free slots in order.
func TestDiskSlots(t *testing.T) {
	disks := func(names ...string) []vmv1.Disk {
		var out []vmv1.Disk
		for _, n := range names {
			out = append(out, vmv1.Disk{Name: n, Hotplug: true})
		}
		return out
	}
	for name, tc := range map[string]struct {
		disks []vmv1.Disk
		known map[string]int
		want  map[string]int
	}{
		"fresh, in order":           {disks("a", "b", "c"), nil, map[string]int{"a": 0, "b": 1, "c": 2}},
		"known kept":                {disks("a", "b"), map[string]int{"b": 0}, map[string]int{"a": 1, "b": 0}},
		"leaving disk holds a slot": {disks("a", "b"), map[string]int{"gone": 0}, map[string]int{"a": 1, "b": 2}},
		"clash: first keeps it":     {disks("a", "b"), map[string]int{"a": 1, "b": 1}, map[string]int{"a": 1, "b": 0}},
		"out of range ignored":      {disks("a"), map[string]int{"a": 9}, map[string]int{"a": 0}},
		"full: none for the fifth":  {disks("a", "b", "c", "d", "e"), nil, map[string]int{"a": 0, "b": 1, "c": 2, "d": 3}},
	} {
		t.Run(name, func(t *testing.T) {
			if got := podspec.DiskSlots(tc.disks, tc.known); !maps.Equal(got, tc.want) {
				t.Errorf("DiskSlots = %v, want %v", got, tc.want)
			}
		})
	}
}
