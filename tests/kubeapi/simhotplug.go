package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// PlayHotplug makes the runners' guests start and plays the node agent of disk hotplug
// (docs/hotplug.md), reading VMs through vms: for a running runner pod whose hotplug request
// (vm.virtpod.io/hotplug) it has not answered, once the VM's status gives the same digest, the
// guest gets every disk of status.disks that is not Detaching and, for one served by an
// attachment pod, whose attachment pod runs for this runner pod on its node; the answer goes
// into vm.virtpod.io/hotplug-result, as the agent writes it.
func (k *Kubelets) PlayHotplug(vms client.Reader) {
	k.mu.Lock()
	k.hotplug = vms
	k.mu.Unlock()
	k.requeue()
}

// errStaleStatus: the VM's status read is older than the request; the pod is looked at again.
var errStaleStatus = errors.New("the VM's status does not give the runner pod's hotplug digest yet")

// playHotplug answers pod's hotplug request, if it has one unanswered; done: it acted.
func playHotplug(ctx context.Context, vms client.Reader, pods typedcorev1.PodInterface, pod *corev1.Pod) (done bool, err error) {
	want := pod.Annotations[vmv1.AnnotationHotplug]
	var res controlapi.HotplugResult
	_ = json.Unmarshal([]byte(pod.Annotations[vmv1.AnnotationHotplugResult]), &res)
	if want == "" || res.For == want || pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil || pod.Labels[vmv1.LabelAttachmentOf] != "" {
		return false, nil
	}
	vm := &vmv1.VirtualMachine{}
	if err := vms.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: pod.Labels[podspec.LabelVMName]}, vm); err != nil {
		return true, err
	}
	if vm.Status.PodUID != string(pod.UID) || vmv1.HotplugDigest(vm.Status.Disks) != want {
		return true, errStaleStatus
	}
	st := controlapi.HotplugStatus{Disks: []controlapi.HotplugDiskState{}}
	for _, d := range vm.Status.Disks {
		if d.State == vmv1.DiskDetaching {
			continue
		}
		if d.AttachmentPod != "" {
			a, err := pods.Get(ctx, d.AttachmentPod, metav1.GetOptions{})
			if err != nil || a.Status.Phase != corev1.PodRunning || a.Labels[vmv1.LabelAttachedTo] != string(pod.UID) || a.Spec.NodeName != pod.Spec.NodeName {
				st.Disks = append(st.Disks, controlapi.HotplugDiskState{Name: d.Name, Slot: int(d.Slot), Error: "attachment pod " + d.AttachmentPod + " refused"})
				continue
			}
		}
		st.Disks = append(st.Disks, controlapi.HotplugDiskState{Name: d.Name, Slot: int(d.Slot), State: controlapi.DiskStateAttached})
	}
	raw, _ := json.Marshal(controlapi.HotplugResult{For: want, Status: st})
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{vmv1.AnnotationHotplugResult: string(raw)}}})
	_, err = pods.Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return true, err
}

// requiredNode is the one node a pod's required node affinity names by metadata.name (an
// attachment pod's, a copier's), else "".
func requiredNode(pod *corev1.Pod) string {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 && !slices.Contains(f.Values, "") {
				return f.Values[0]
			}
		}
	}
	return ""
}
