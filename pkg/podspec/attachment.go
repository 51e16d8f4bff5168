package podspec

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// An attachment pod serves one disk hotplugged into a running guest (docs/hotplug.md): on the
// guest's node it mounts the disk's source as the runner pod would and runs `virtpod-runner
// disk-serve`, which serves the disk over NBD on controlapi.AttachmentSocket in its control
// directory; the node agent links that socket into the runner's control directory. It is a
// copier pod in all but its program and labels: the runner image at Pod Security restricted,
// a control directory, never restarted (a new one is the controller's to make).

// Attachment is what an attachment pod is made of.
type Attachment struct {
	// VM owns the pod; Disk is the VM's disk (spec.guest.disks[]) the pod serves.
	VM   *vmv1.VirtualMachine
	Disk vmv1.Disk
	// Claim is what the controller read of the disk's claim, for a claim disk.
	Claim Claim
	// Runner is the guest's runner pod: the attachment runs on its node, for its UID.
	Runner *corev1.Pod
	// Image is the runner image.
	Image string
}

// AttachmentPodName is the attachment pod of vm's disk: <vm>-hp-<disk>, cut and ended by a hash
// past a pod name's 253 characters.
func AttachmentPodName(vm, disk string) string { return joinName(vm+"-hp", disk) }

// attachmentStateSize bounds the emptyDir of a files disk's ISO: a ConfigMap or a Secret holds
// at most 1 MiB.
var attachmentStateSize = resource.MustParse("8Mi")

// AttachmentPod renders a's attachment pod, or nil for a disk it cannot serve (an image disk,
// or one without a source; the API refuses hotplug for both). The disk's volume, its mount or
// device, and its --disk are the runner pod's own (disks), so both read the disk alike. Pure.
func AttachmentPod(a Attachment) *corev1.Pod {
	one := &vmv1.VirtualMachine{ObjectMeta: a.VM.ObjectMeta}
	one.Spec.Guest.Disks = []vmv1.Disk{a.Disk}
	var claims map[string]Claim
	if c := a.Disk.PersistentVolumeClaim; c != nil {
		claims = map[string]Claim{c.ClaimName: a.Claim}
	}
	p := disks(one, Options{Claims: claims})
	if len(p.disks) != 1 || p.disks[0].Kind == runnerconfig.DiskImage {
		return nil
	}
	rd := p.disks[0]
	rd.Migrate, rd.Hotplug, rd.Slot = "", false, 0 // the runner's, not disk-serve's
	args := []string{"disk-serve", "--control-dir=" + vmv1.ControlDir, "--disk=" + rd.String()}
	vols, mounts := p.volumes, p.mounts
	if rd.Kind == runnerconfig.DiskFiles {
		args = append(args, "--state-dir="+runnerconfig.DefaultStateDir)
		vols = append(vols, corev1.Volume{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &attachmentStateSize}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "state", MountPath: runnerconfig.DefaultStateDir})
	}
	pod := CopierPod(Copier{
		Name: AttachmentPodName(a.VM.Name, a.Disk.Name), Namespace: a.VM.Namespace, VMName: a.VM.Name, Image: a.Image,
		Owner: metav1.OwnerReference{APIVersion: vmv1.GroupVersion.String(), Kind: "VirtualMachine", Name: a.VM.Name, UID: a.VM.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)},
		Node: a.Runner.Spec.NodeName, Args: args, Control: true,
	})
	delete(pod.Labels, vmv1.LabelCopierOf)
	pod.Labels[vmv1.LabelAttachmentOf] = a.VM.Name
	pod.Labels[vmv1.LabelAttachedDisk] = a.Disk.Name
	pod.Labels[vmv1.LabelAttachedTo] = string(a.Runner.UID)
	pod.Spec.Volumes = vols
	c := &pod.Spec.Containers[0]
	c.Name, c.VolumeMounts, c.VolumeDevices = vmv1.AttachmentContainer, mounts, p.devices
	return pod
}
