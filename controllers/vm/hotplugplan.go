package vm

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// hotplugInput is what the hotplug step decides from (hotplug.go reads it).
type hotplugInput struct {
	vmName string
	runner string                    // the runner pod's name, for messages
	slots  int                       // the runner pod's hotplug slots; 0: started without any
	spec   []vmv1.Disk               // the spec's hotpluggable disks, in order
	own    map[string]int            // the slots of the disks the runner pod holds as the spec has them, by disk
	guest  *controlapi.HotplugStatus // the agent's last answer; nil before any
	prev   []vmv1.HotplugDiskStatus  // status.disks as read
	pods   map[string]*corev1.Pod    // this runner pod's attachment pods, by disk
	held   map[string]string         // disks that cannot be served now, and why
}

// hotplugPlan is what the step does: status.disks, and the attachment pods to make and delete.
type hotplugPlan struct {
	status []vmv1.HotplugDiskStatus
	create []vmv1.Disk
	remove []*corev1.Pod
	failed map[string]string // the agent's errors, by disk
}

// guestDisks is what the guest has on its slots: the agent's last answer, or before any, the
// disks the runner pod started with.
func (in hotplugInput) guestDisks() map[string]controlapi.HotplugDiskState {
	out := map[string]controlapi.HotplugDiskState{}
	if in.guest != nil {
		for _, d := range in.guest.Disks {
			out[d.Name] = d
		}
		return out
	}
	for name, slot := range in.own {
		out[name] = controlapi.HotplugDiskState{Name: name, Slot: slot, State: controlapi.DiskStateAttached}
	}
	return out
}

// planHotplug decides every hotpluggable disk's state, and which attachment pods are needed. A
// disk of the spec the runner pod holds (it started with it) is served by the pod itself; any
// other is served by its attachment pod, named in status only once that pod runs, since the
// node agent acts on the status. A disk the guest has and the spec lacks is Detaching until the
// agent says the guest released it; its attachment pod serves it until then. Pure.
func planHotplug(in hotplugInput) hotplugPlan {
	p := hotplugPlan{failed: map[string]string{}}
	guest := in.guestDisks()
	known := podspec.KnownSlots(in.prev)
	for name, g := range guest {
		known[name] = g.Slot
	}
	slots := podspec.DiskSlots(in.spec, known)
	for _, d := range in.spec {
		st := vmv1.HotplugDiskStatus{Name: d.Name, ReadOnly: diskReadOnly(d), Slot: int32(slots[d.Name]), State: vmv1.DiskAttaching}
		if in.slots == 0 {
			st.Message = fmt.Sprintf("runner pod %s was started without hotplug slots (before disk hotplug, or not a qemu guest): the disk is attached at the next start (vmctl restart %s)", in.runner, in.vmName)
			p.status = append(p.status, st)
			continue
		}
		_, own := in.own[d.Name]
		if !own {
			st.AttachmentPod, st.Message = p.attachment(in, d)
		}
		g, has := guest[d.Name]
		switch {
		case has && g.State == controlapi.DiskStateAttached && g.Slot == int(st.Slot) && (own || st.AttachmentPod != ""):
			st.State, st.Message = vmv1.DiskAttached, ""
		case g.Error != "":
			st.Message, p.failed[d.Name] = g.Error, g.Error
		case !has && in.guest != nil && (own || st.AttachmentPod != "") && strings.Contains(in.guest.Error, d.Name):
			// The runner lists no disk it could not attach; its reason is the answer's.
			st.Message, p.failed[d.Name] = in.guest.Error, in.guest.Error
		case st.Message == "":
			st.Message = "asking the guest to take the disk"
		}
		p.status = append(p.status, st)
	}
	p.detaching(in, guest)
	for name, pod := range in.pods {
		_, inGuest := guest[name]
		_, own := in.own[name]
		if pod.DeletionTimestamp == nil && (!inGuest && !specHas(in.spec, name) || own && specHas(in.spec, name)) {
			p.remove = append(p.remove, pod)
		}
	}
	sort.Slice(p.remove, func(i, j int) bool { return p.remove[i].Name < p.remove[j].Name })
	return p
}

// attachment is the pod serving disk d once it runs, or why there is none yet; it plans the
// pod's making (or remaking, when it ended).
func (p *hotplugPlan) attachment(in hotplugInput, d vmv1.Disk) (running, why string) {
	pod := in.pods[d.Name]
	switch {
	case pod == nil && in.held[d.Name] != "":
		return "", in.held[d.Name]
	case pod == nil:
		p.create = append(p.create, d)
		return "", fmt.Sprintf("starting attachment pod %s, which serves the disk", podspec.AttachmentPodName(in.vmName, d.Name))
	case pod.DeletionTimestamp != nil:
		return "", fmt.Sprintf("waiting for attachment pod %s, which is being deleted, to go", pod.Name)
	case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded:
		p.remove = append(p.remove, pod)
		return "", fmt.Sprintf("attachment pod %s ended (%s): making a new one; see its log (kubectl logs %s)", pod.Name, pod.Status.Phase, pod.Name)
	case pod.Status.Phase != corev1.PodRunning:
		return "", fmt.Sprintf("attachment pod %s is %s: see kubectl describe pod %s", pod.Name, orPending(pod.Status.Phase), pod.Name)
	}
	return pod.Name, ""
}

// detaching adds the disks the guest has and the spec lacks, in name order.
func (p *hotplugPlan) detaching(in hotplugInput, guest map[string]controlapi.HotplugDiskState) {
	var names []string
	for name := range guest {
		if !specHas(in.spec, name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		g := guest[name]
		st := vmv1.HotplugDiskStatus{Name: name, State: vmv1.DiskDetaching, Slot: int32(g.Slot), Message: g.Error}
		if g.Error != "" {
			p.failed[name] = g.Error
		}
		if pod := in.pods[name]; pod != nil {
			st.AttachmentPod = pod.Name
		}
		if st.Message == "" {
			st.Message = "asking the guest to release the disk"
		}
		p.status = append(p.status, st)
	}
}

func specHas(disks []vmv1.Disk, name string) bool {
	return slices.ContainsFunc(disks, func(d vmv1.Disk) bool { return d.Name == name })
}

// diskReadOnly: the guest cannot write the disk (a read-only claim, a ConfigMap or Secret).
func diskReadOnly(d vmv1.Disk) bool {
	return d.PersistentVolumeClaim != nil && d.PersistentVolumeClaim.ReadOnly || d.ConfigMap != nil || d.Secret != nil
}

func orPending(p corev1.PodPhase) corev1.PodPhase {
	if p == "" {
		return corev1.PodPending
	}
	return p
}
