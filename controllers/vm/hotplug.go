package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// Disk hotplug (docs/hotplug.md), the controller's part: attachment pods for the disks added to
// a running guest's spec, status.disks, and the request to the node agent, which is the runner
// pod's vm.virtpod.io/hotplug annotation (the digest of status.disks, written after the status
// so the agent finds the status it names).

// hotplug plans the running guest's hotpluggable disks (hotplugplan.go) and makes and deletes
// attachment pods. Only for the pod this status runs, its guest started (reconcileGuest).
func (r *Reconciler) hotplug(ctx context.Context, s *scope) error {
	if s.pod.Annotations[vmv1.AnnotationSuspend] != "" {
		return nil // the guest is being saved as its disks are now
	}
	in, err := r.hotplugInput(ctx, s)
	if err != nil {
		return err
	}
	plan := planHotplug(in)
	for _, d := range plan.create {
		if err := r.makeAttachment(ctx, s, d); err != nil {
			return err
		}
	}
	for _, p := range plan.remove {
		if err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return r.fail("delete-attachment", err)
		}
	}
	s.next.Status.Disks, s.hotplugFailed = plan.status, plan.failed
	// A guest with nothing on its slots, never asked, costs its pod no write.
	if _, asked := s.pod.Annotations[vmv1.AnnotationHotplug]; in.slots > 0 && (len(plan.status) > 0 || asked) {
		digest := vmv1.HotplugDigest(plan.status)
		s.hotplugDigest = &digest
	}
	return nil
}

// hotplugInput reads what planHotplug decides from.
func (r *Reconciler) hotplugInput(ctx context.Context, s *scope) (hotplugInput, error) {
	vm, pod := s.vm, s.pod
	in := hotplugInput{vmName: vm.Name, runner: pod.Name, spec: vm.Spec.Guest.HotplugDisks(), own: map[string]int{}, prev: vm.Status.Disks, held: map[string]string{}}
	if cfg, err := runnerpod.Config(pod); err == nil {
		in.slots = cfg.HotplugSlots
	}
	for name, slot := range runnerpod.SlotDisks(pod) {
		if i := indexOfDisk(in.spec, name); i >= 0 && sameSource(pod, in.spec[i]) {
			in.own[name] = slot
		}
	}
	var res controlapi.HotplugResult
	if raw := pod.Annotations[vmv1.AnnotationHotplugResult]; raw != "" && json.Unmarshal([]byte(raw), &res) == nil {
		in.guest = &res.Status
	}
	in.pods = s.attachments
	for _, d := range in.spec {
		if _, own := in.own[d.Name]; own || in.pods[d.Name] != nil || d.PersistentVolumeClaim == nil {
			continue
		}
		if why, err := r.claimTaken(ctx, vm, d.PersistentVolumeClaim.ClaimName); err != nil {
			return in, err
		} else if why != nil {
			in.held[d.Name] = why.message
		} else if _, ok := s.disks.claims[d.PersistentVolumeClaim.ClaimName]; !ok {
			in.held[d.Name] = fmt.Sprintf("waiting for PersistentVolumeClaim %q: see the DisksReady condition", d.PersistentVolumeClaim.ClaimName)
		}
	}
	return in, nil
}

// dropAttachments deletes the VM's attachment pods that serve no runner pod of now (pod's guest
// ended or was replaced, and its next pod holds every hotpluggable disk itself), and returns
// those that serve pod, by disk: what the hotplug step plans with.
func (r *Reconciler) dropAttachments(ctx context.Context, vm *vmv1.VirtualMachine, pod *corev1.Pod) (map[string]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, client.InNamespace(vm.Namespace), client.MatchingLabels{vmv1.LabelAttachmentOf: vm.Name}); err != nil {
		return nil, r.fail("list-attachments", err)
	}
	serving := map[string]*corev1.Pod{}
	for i := range list.Items {
		p := &list.Items[i]
		switch {
		case !ownedBy(p, vm):
		case pod != nil && !podEnded(pod) && p.Labels[vmv1.LabelAttachedTo] == string(pod.UID):
			serving[p.Labels[vmv1.LabelAttachedDisk]] = p
		case p.DeletionTimestamp != nil:
		default:
			if err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
				return nil, r.fail("delete-attachment", err)
			}
		}
	}
	return serving, nil
}

// makeAttachment creates the attachment pod serving disk d to the guest of s.pod, on its node.
func (r *Reconciler) makeAttachment(ctx context.Context, s *scope, d vmv1.Disk) error {
	image := s.images.Runner
	if c := runnerpod.ContainerIn(&s.pod.Spec); c != nil {
		image = c.Image // the guest's own runner, whose qemu-nbd it talks to
	}
	var claim podspec.Claim
	if c := d.PersistentVolumeClaim; c != nil {
		claim = s.disks.claims[c.ClaimName]
	}
	pod := podspec.AttachmentPod(podspec.Attachment{VM: s.vm, Disk: d, Claim: claim, Runner: s.pod, Image: image})
	if pod == nil {
		return nil // a disk no attachment pod serves: the API refuses hotplug for it
	}
	if err := r.Client.Create(ctx, pod); apierrors.IsAlreadyExists(err) {
		return nil // the cache lags our own create; its event brings us back
	} else if err != nil {
		r.Recorder.Eventf(s.vm, s.pod, corev1.EventTypeWarning, vmv1.EventDiskHotplugFailed, "Attach", "Could not create attachment pod %s for disk %s: %v", pod.Name, d.Name, err)
		return r.fail("create-attachment", err)
	}
	return nil
}

// requestHotplug writes the digest of the status just written on the runner pod, which asks
// its node agent to bring the guest there; after the status, so the agent reads what it names.
func (r *Reconciler) requestHotplug(ctx context.Context, s *scope) error {
	if s.hotplugDigest == nil || s.pod == nil || s.pod.Annotations[vmv1.AnnotationHotplug] == *s.hotplugDigest {
		return nil
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, vmv1.AnnotationHotplug, *s.hotplugDigest)
	if err := r.Client.Patch(ctx, s.pod, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
		return r.fail("request-hotplug", err)
	}
	return nil
}

func indexOfDisk(disks []vmv1.Disk, name string) int {
	for i, d := range disks {
		if d.Name == name {
			return i
		}
	}
	return -1
}

// sameSource says whether pod holds disk d as the spec has it now: a volume of the same claim,
// ConfigMap or Secret, or an empty disk.
func sameSource(pod *corev1.Pod, d vmv1.Disk) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Name != podspec.DiskVolumeName(d.Name) {
			continue
		}
		switch {
		case d.PersistentVolumeClaim != nil:
			return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == d.PersistentVolumeClaim.ClaimName && v.PersistentVolumeClaim.ReadOnly == d.PersistentVolumeClaim.ReadOnly
		case d.ConfigMap != nil:
			return v.ConfigMap != nil && v.ConfigMap.Name == d.ConfigMap.Name
		case d.Secret != nil:
			return v.Secret != nil && v.Secret.SecretName == d.Secret.SecretName
		case d.EmptyDisk != nil:
			return v.EmptyDir != nil
		}
	}
	return false
}

// announceHotplug tells of each disk attached or detached, and of each new failure the node
// agent reported, once.
func (r *Reconciler) announceHotplug(vm, next *vmv1.VirtualMachine, pod *corev1.Pod, failed map[string]string) {
	if pod == nil {
		return
	}
	was := map[string]vmv1.HotplugDiskStatus{}
	for _, d := range vm.Status.Disks {
		was[d.Name] = d
	}
	for _, d := range next.Status.Disks {
		before, had := was[d.Name]
		delete(was, d.Name)
		if d.State == vmv1.DiskAttached && (!had || before.State != vmv1.DiskAttached) {
			r.Recorder.Eventf(vm, pod, corev1.EventTypeNormal, vmv1.EventDiskAttached, "Attach", "Disk %s attached to the guest (slot %d)%s", d.Name, d.Slot, servedBy(d))
			r.Metrics.hotplugged("attach", "attached")
		}
		if why := failed[d.Name]; why != "" && before.Message != why {
			r.Recorder.Eventf(vm, pod, corev1.EventTypeWarning, vmv1.EventDiskHotplugFailed, "Hotplug", "Disk %s: %s", d.Name, strings.TrimPrefix(why, "disk "+d.Name+": "))
			r.Metrics.hotplugged(map[bool]string{true: "detach", false: "attach"}[d.State == vmv1.DiskDetaching], "failed")
		}
	}
	for name, d := range was {
		if d.State == vmv1.DiskDetaching || d.State == vmv1.DiskAttached && !specHas(next.Spec.Guest.HotplugDisks(), name) {
			r.Recorder.Eventf(vm, pod, corev1.EventTypeNormal, vmv1.EventDiskDetached, "Detach", "Disk %s detached from the guest (the guest released it)", name)
			r.Metrics.hotplugged("detach", "detached")
		}
	}
}

func servedBy(d vmv1.HotplugDiskStatus) string {
	if d.AttachmentPod == "" {
		return ""
	}
	return ", served by attachment pod " + d.AttachmentPod
}
