package vm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// hotplugged waits until status.disks reads want (name:state:slot:attachmentPod, joined by
// spaces) and the runner pod asks its agent for exactly that status (its digest).
func hotplugged(t *testing.T, vm *vmv1.VirtualMachine, want string) *vmv1.VirtualMachine {
	t.Helper()
	var got *vmv1.VirtualMachine
	eventually(t, "status.disks "+want, func() error {
		got = getVM(t, vm)
		var parts []string
		for _, d := range got.Status.Disks {
			parts = append(parts, fmt.Sprintf("%s:%s:%d:%s", d.Name, d.State, d.Slot, d.AttachmentPod))
		}
		if s := strings.Join(parts, " "); s != want {
			return fmt.Errorf("status.disks %q %+v", s, got.Status.Disks)
		}
		pod, err := runnerPod(vm)
		if err != nil {
			return err
		}
		if d := vmv1.HotplugDigest(got.Status.Disks); pod.Annotations[vmv1.AnnotationHotplug] != d {
			return fmt.Errorf("runner pod asks for %q, status is %q", pod.Annotations[vmv1.AnnotationHotplug], d)
		}
		return nil
	})
	return got
}

// agentAnswers writes the node agent's answer on the runner pod: for the digest it carries,
// the guest has disks (name:slot each).
func agentAnswers(t *testing.T, vm *vmv1.VirtualMachine, disks ...string) {
	t.Helper()
	pod, err := runnerPod(vm)
	if err != nil {
		t.Fatal(err)
	}
	res := controlapi.HotplugResult{For: pod.Annotations[vmv1.AnnotationHotplug], Status: controlapi.HotplugStatus{Disks: []controlapi.HotplugDiskState{}}}
	for _, d := range disks {
		var name string
		var slot int
		fmt.Sscanf(strings.Replace(d, ":", " ", 1), "%s %d", &name, &slot)
		res.Status.Disks = append(res.Status.Disks, controlapi.HotplugDiskState{Name: name, Slot: slot, State: controlapi.DiskStateAttached})
	}
	raw, _ := json.Marshal(res)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{vmv1.AnnotationHotplugResult: string(raw)}}})
	if err := env.Client.Patch(context.Background(), pod, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

func attachmentPod(t *testing.T, vm *vmv1.VirtualMachine, disk string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	eventually(t, "attachment pod of "+disk, func() error {
		return env.Client.Get(context.Background(), types.NamespacedName{Namespace: vm.Namespace, Name: podspec.AttachmentPodName(vm.Name, disk)}, p)
	})
	return p
}

// TestDiskHotplug plays an attach, a detach and a restart with the kubelet's and the node
// agent's parts written as they write them: the attachment pod on the guest's node, status.disks
// naming it once it runs, the digest on the runner pod after the status, the agent's answer,
// events, Migratable false while the guest's slots differ from its pod's, and a restart whose pod
// holds the disk itself on its slot while the attachment pod goes.
func TestDiskHotplug(t *testing.T) {
	ns := namespace(t)
	class := storageClass(t, "hotplug-wffc", storagev1.VolumeBindingWaitForFirstConsumer)
	claim(t, ns, "logs", class, corev1.PersistentVolumeFilesystem)
	v := diskVM(ns, "hot")
	v.Spec.Guest.NetworkMode = vmv1.NetworkMasquerade // migratable but for its disks
	vm := create(t, v)
	pod := waitPod(t, vm, "")
	if !slices.Contains(pod.Spec.Containers[0].Args, "--hotplug-slots=4") {
		t.Fatalf("runner args %q: want --hotplug-slots=4", pod.Spec.Containers[0].Args)
	}
	bind(t, pod, "node-hot")
	started(t, pod)
	condition(t, vm, vmv1.PhaseRunning, vmv1.ConditionReady, metav1.ConditionTrue, vmv1.ReasonGuestRunning)

	// Attach: the attachment pod, pending, then running; the agent's answer.
	reconciled(t, vm, func(v *vmv1.VirtualMachine) {
		v.Spec.Guest.Disks = []vmv1.Disk{{Name: "logs", Hotplug: true, PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "logs"}}}
	})
	att := attachmentPod(t, vm, "logs")
	if l := att.Labels; l[vmv1.LabelAttachmentOf] != "hot" || l[vmv1.LabelAttachedDisk] != "logs" || l[vmv1.LabelAttachedTo] != string(pod.UID) || metav1.GetControllerOf(att).UID != vm.UID {
		t.Fatalf("attachment pod labels %v, owner %+v", l, metav1.GetControllerOf(att))
	}
	if terms := att.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms; terms[0].MatchFields[0].Values[0] != "node-hot" {
		t.Errorf("attachment pod's node affinity %+v, want node-hot", terms)
	}
	hotplugged(t, vm, "logs:Attaching:0:")
	eventually(t, "the disk waits for its attachment pod", func() error {
		if d := getVM(t, vm).Status.Disks; len(d) != 1 || !strings.Contains(d[0].Message, "attachment pod hot-hp-logs is Pending") {
			return fmt.Errorf("status.disks %+v", d)
		}
		return nil
	})
	kubelet(t, att, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning })
	hotplugged(t, vm, "logs:Attaching:0:hot-hp-logs")
	agentAnswers(t, vm, "logs:0")
	hotplugged(t, vm, "logs:Attached:0:hot-hp-logs")
	waitEvent(t, vm, vmv1.EventDiskAttached)
	eventually(t, "not migratable with a hotplugged disk", func() error {
		if c := meta.FindStatusCondition(getVM(t, vm).Status.Conditions, vmv1.ConditionMigratable); c == nil || c.Reason != vmv1.ReasonDiskNotMigratable || !strings.Contains(c.Message, "logs attached") {
			return fmt.Errorf("Migratable %+v", c)
		}
		return nil
	})

	// Detach: Detaching while the guest has it, its attachment pod kept; gone once released.
	reconciled(t, vm, func(v *vmv1.VirtualMachine) { v.Spec.Guest.Disks = nil })
	hotplugged(t, vm, "logs:Detaching:0:hot-hp-logs")
	if p := attachmentPod(t, vm, "logs"); p.DeletionTimestamp != nil {
		t.Fatal("the attachment pod is deleted while the guest still has the disk")
	}
	agentAnswers(t, vm)
	hotplugged(t, vm, "")
	waitEvent(t, vm, vmv1.EventDiskDetached)
	eventually(t, "the attachment pod deleted", func() error {
		p := &corev1.Pod{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(att), p); apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil {
			return nil
		}
		return fmt.Errorf("attachment pod still there")
	})

	// Attached again on slot 0, then the guest crashes: the next pod holds the disk itself on
	// slot 0, and the old attachment pod goes.
	reconciled(t, vm, func(v *vmv1.VirtualMachine) {
		v.Spec.Guest.Disks = []vmv1.Disk{{Name: "logs", Hotplug: true, PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "logs"}}}
	})
	eventually(t, "a new attachment pod", func() error {
		if p := attachmentPod(t, vm, "logs"); p.UID == att.UID {
			return fmt.Errorf("still the old one")
		}
		return nil
	})
	att = attachmentPod(t, vm, "logs")
	kubelet(t, att, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning })
	hotplugged(t, vm, "logs:Attaching:0:hot-hp-logs")
	agentAnswers(t, vm, "logs:0")
	hotplugged(t, vm, "logs:Attached:0:hot-hp-logs")
	kubelet(t, pod, ended(1, "Error", "the guest crashed"))
	next := waitPod(t, vm, pod.UID)
	if !slices.ContainsFunc(next.Spec.Containers[0].Args, func(a string) bool {
		return strings.HasPrefix(a, "--disk=name=logs,") && strings.HasSuffix(a, ",slot=0")
	}) {
		t.Errorf("the next pod's args %q: want logs on slot 0", next.Spec.Containers[0].Args)
	}
	eventually(t, "the old attachment pod deleted", func() error {
		p := &corev1.Pod{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(att), p); apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil {
			return nil
		}
		return fmt.Errorf("attachment pod still there")
	})
	bind(t, next, "node-hot")
	started(t, next)
	hotplugged(t, vm, "logs:Attached:0:")
	t.Logf("events:\n%s", events(t, vm))
}
