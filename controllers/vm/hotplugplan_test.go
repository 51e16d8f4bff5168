package vm

import (
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
)

func claimDisk(name, claim string) vmv1.Disk {
	return vmv1.Disk{Name: name, Hotplug: true, PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: claim}}
}

func attachmentIn(name string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-hp-" + name}, Status: corev1.PodStatus{Phase: phase}}
}

// TestPlanHotplug: each disk's state and message, and the attachment pods made and deleted, as
// the guest, the spec and the pods stand.
func TestPlanHotplug(t *testing.T) {
	attached := func(disks ...controlapi.HotplugDiskState) *controlapi.HotplugStatus {
		return &controlapi.HotplugStatus{Disks: disks}
	}
	on := func(name string, slot int) controlapi.HotplugDiskState {
		return controlapi.HotplugDiskState{Name: name, Slot: slot, State: controlapi.DiskStateAttached}
	}
	for name, tc := range map[string]struct {
		in             hotplugInput
		want           string // name:state:slot:pod, joined by spaces
		create, remove string // disk names, pod names
		message        string // in some disk's message
	}{
		"boot disk, before any answer": {
			in:   hotplugInput{slots: 4, spec: []vmv1.Disk{claimDisk("logs", "c")}, own: map[string]int{"logs": 1}},
			want: "logs:Attached:1:",
		},
		"new disk: its attachment pod is made": {
			in:   hotplugInput{slots: 4, spec: []vmv1.Disk{claimDisk("logs", "c")}},
			want: "logs:Attaching:0:", create: "logs", message: "starting attachment pod web-hp-logs",
		},
		"attachment pod pending: not named yet": {
			in:   hotplugInput{slots: 4, spec: []vmv1.Disk{claimDisk("logs", "c")}, pods: map[string]*corev1.Pod{"logs": attachmentIn("logs", corev1.PodPending)}},
			want: "logs:Attaching:0:", message: "is Pending",
		},
		"attachment pod runs: named, the guest not there yet": {
			in:   hotplugInput{slots: 4, spec: []vmv1.Disk{claimDisk("logs", "c")}, pods: map[string]*corev1.Pod{"logs": attachmentIn("logs", corev1.PodRunning)}},
			want: "logs:Attaching:0:web-hp-logs",
		},
		"attached by the agent": {
			in: hotplugInput{slots: 4, spec: []vmv1.Disk{claimDisk("logs", "c")}, pods: map[string]*corev1.Pod{"logs": attachmentIn("logs", corev1.PodRunning)},
				guest: attached(on("logs", 0))},
			want: "logs:Attached:0:web-hp-logs",
		},
		"the runner's error": {
			in: hotplugInput{slots: 4, spec: []vmv1.Disk{claimDisk("logs", "c")}, pods: map[string]*corev1.Pod{"logs": attachmentIn("logs", corev1.PodRunning)},
				guest: attached(controlapi.HotplugDiskState{Name: "logs", Error: "blockdev-add: no such socket"})},
			want: "logs:Attaching:0:web-hp-logs", message: "no such socket",
		},
		"the runner could not attach it": {
			in: hotplugInput{slots: 4, spec: []vmv1.Disk{claimDisk("logs", "c")}, pods: map[string]*corev1.Pod{"logs": attachmentIn("logs", corev1.PodRunning)},
				guest: &controlapi.HotplugStatus{Error: "disk logs: blockdev-add: Failed to connect"}},
			want: "logs:Attaching:0:web-hp-logs", message: "Failed to connect",
		},
		"the agent waits for the attachment pod: no failure": {
			in: hotplugInput{slots: 4, spec: []vmv1.Disk{claimDisk("logs", "c")}, pods: map[string]*corev1.Pod{"logs": attachmentIn("logs", corev1.PodPending)},
				guest: &controlapi.HotplugStatus{Error: "disk logs: waiting for its attachment pod to run"}},
			want: "logs:Attaching:0:", message: "is Pending",
		},
		"removed from the spec: detaching, its pod kept": {
			in:   hotplugInput{slots: 4, pods: map[string]*corev1.Pod{"logs": attachmentIn("logs", corev1.PodRunning)}, guest: attached(on("logs", 2))},
			want: "logs:Detaching:2:web-hp-logs", message: "release",
		},
		"released: its pod goes": {
			in:   hotplugInput{slots: 4, pods: map[string]*corev1.Pod{"logs": attachmentIn("logs", corev1.PodRunning)}, guest: attached()},
			want: "", remove: "web-hp-logs",
		},
		"held claim: no pod": {
			in:   hotplugInput{slots: 4, spec: []vmv1.Disk{claimDisk("logs", "c")}, held: map[string]string{"logs": "in use by VirtualMachine other"}},
			want: "logs:Attaching:0:", message: "in use by VirtualMachine other",
		},
		"failed attachment pod: remade": {
			in:   hotplugInput{slots: 4, spec: []vmv1.Disk{claimDisk("logs", "c")}, pods: map[string]*corev1.Pod{"logs": attachmentIn("logs", corev1.PodFailed)}},
			want: "logs:Attaching:0:", remove: "web-hp-logs", message: "ended (Failed)",
		},
		"a slot kept by a disk leaving": {
			in: hotplugInput{slots: 4, spec: []vmv1.Disk{claimDisk("new", "c")}, guest: attached(on("old", 0)),
				pods: map[string]*corev1.Pod{"old": attachmentIn("old", corev1.PodRunning)}},
			want: "new:Attaching:1: old:Detaching:0:web-hp-old", create: "new",
		},
		"pod without slots": {
			in:   hotplugInput{vmName: "web", runner: "web-runner", spec: []vmv1.Disk{claimDisk("logs", "c")}},
			want: "logs:Attaching:0:", message: "started without hotplug slots",
		},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.in.vmName == "" {
				tc.in.vmName = "web"
			}
			if tc.in.own == nil {
				tc.in.own = map[string]int{}
			}
			p := planHotplug(tc.in)
			var got, create, remove, messages []string
			for _, d := range p.status {
				got = append(got, d.Name+":"+string(d.State)+":"+strconv.Itoa(int(d.Slot))+":"+d.AttachmentPod)
				messages = append(messages, d.Message)
			}
			for _, d := range p.create {
				create = append(create, d.Name)
			}
			for _, pod := range p.remove {
				remove = append(remove, pod.Name)
			}
			if strings.Join(got, " ") != tc.want || strings.Join(create, " ") != tc.create || strings.Join(remove, " ") != tc.remove {
				t.Errorf("status %q create %q remove %q; want %q, %q, %q", got, create, remove, tc.want, tc.create, tc.remove)
			}
			if len(p.failed) > 0 && strings.Contains(name, "no failure") {
				t.Errorf("failures %v", p.failed)
			}
			if !strings.Contains(strings.Join(messages, "|"), tc.message) {
				t.Errorf("messages %q, want one with %q", messages, tc.message)
			}
		})
	}
}
