package migratable

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// hotplugged says why the guest running in pod cannot move after disks were attached to it or
// detached from it ("" when it has on its hotplug slots just the disks the pod started with): a
// migration's target is a copy of the runner pod, so it would build the guest's hardware as the
// pod started, and QEMU refuses a target whose devices differ (docs/hotplug.md).
func hotplugged(pod *corev1.Pod) string {
	var res controlapi.HotplugResult
	raw := pod.Annotations[vmv1.AnnotationHotplugResult]
	if raw == "" || json.Unmarshal([]byte(raw), &res) != nil {
		return ""
	}
	boot := runnerpod.SlotDisks(pod)
	now := map[string]int{}
	for _, d := range res.Status.Disks {
		now[d.Name] = d.Slot
	}
	if maps.Equal(boot, now) {
		return ""
	}
	var changed []string
	for name, slot := range now {
		if s, ok := boot[name]; !ok || s != slot {
			changed = append(changed, name+" attached")
		}
	}
	for name := range boot {
		if _, ok := now[name]; !ok {
			changed = append(changed, name+" detached")
		}
	}
	slices.Sort(changed)
	return fmt.Sprintf("disks were attached to or detached from the running guest (%s; runner pod %s), and a migration's target is built as the pod started: "+
		"restart the VM (vmctl restart) to make it migratable; its next pod holds every hotpluggable disk of the spec", strings.Join(changed, ", "), pod.Name)
}
