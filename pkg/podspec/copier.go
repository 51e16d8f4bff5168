package podspec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// A copier pod writes the claims of a snapshot or a restore (docs/snapshots.md): with
// `virtpod-runner disk-target` it serves the snapshot's claims over NBD, on unix sockets in its
// control directory, for the running guest's QEMU to push a point-in-time copy into (the node
// agent relays between the two pods' control directories); with `virtpod-runner disk-copy` it
// copies one claim's disk into another (a stopped VM, a restore). It runs the runner image at Pod
// Security restricted, as the runner does, and never restarts: an attempt that failed is the
// snapshot's failure.

// CopierMount is where a copier pod mounts each claim: CopierMount/<claim>.
const CopierMount = "/virtpod/copy"

// Copier is what a copier pod is made of.
type Copier struct {
	Name, Namespace string
	// Owner is the snapshot or restore; Of its name (label vm.virtpod.io/copier-of); VMName the VM
	// whose disks it copies (label vm.virtpod.io/name, which holds the VM's claims while it runs).
	Owner  metav1.OwnerReference
	Of     string
	VMName string
	Image  string
	// Node, when set, is the only node the pod may run on: a running guest's, which pushes
	// into it through its node agent.
	Node string
	// Args are virtpod-runner's: disk-target or disk-copy and their flags.
	Args []string
	// Claims are mounted at CopierMount/<claim>, read-only where asked.
	Claims []CopierClaim
	// Control asks for a control directory (the device plugin's): disk-target serves there.
	Control bool
}

// CopierClaim is one claim a copier mounts.
type CopierClaim struct {
	Name     string
	ReadOnly bool
}

// CopierDisk is the path of the disk file on claim in a copier pod.
func CopierDisk(claim string) string { return path.Join(CopierMount, claim, runnerconfig.DiskFileName) }

// CopierPod renders a copier pod. Pure.
func CopierPod(c Copier) *corev1.Pod {
	one := resource.MustParse("1")
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	if c.Control {
		res.Requests[vmv1.ResourceControl] = one
		res.Limits[vmv1.ResourceControl] = one
	}
	ctr := corev1.Container{
		Name:                     vmv1.CopierContainer,
		Image:                    c.Image,
		ImagePullPolicy:          pullPolicy(c.Image),
		Command:                  []string{RunnerBinary},
		Args:                     c.Args,
		Resources:                res,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          restricted(),
	}
	var vols []corev1.Volume
	for i, cl := range c.Claims {
		name := fmt.Sprintf("claim-%d", i)
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: cl.Name, ReadOnly: cl.ReadOnly}}})
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: path.Join(CopierMount, cl.Name), ReadOnly: cl.ReadOnly})
	}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      c.Name,
			Namespace: c.Namespace,
			Labels: map[string]string{
				vmv1.LabelManagedBy: vmv1.ManagedBy,
				LabelVMName:         c.VMName,
				vmv1.LabelCopierOf:  c.Of,
			},
			OwnerReferences: []metav1.OwnerReference{c.Owner},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:        ptr.To(true),
				RunAsUser:           ptr.To(vmv1.RunnerUID),
				RunAsGroup:          ptr.To(vmv1.RunnerGID),
				FSGroup:             ptr.To(vmv1.RunnerGID),
				FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
				SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{ctr},
			Volumes:    vols,
		},
	}
	if c.Node != "" {
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{c.Node}}},
			}}},
		}}
	}
	return pod
}

// SnapshotClaimName is the claim a snapshot copies disk into: <snapshot>-<disk>, or, past a
// claim name's 253 characters, cut and ended by a hash of both, so it stays unique.
func SnapshotClaimName(snapshot, disk string) string { return joinName(snapshot, disk) }

// joinName is a-b, at most 253 characters.
func joinName(a, b string) string {
	n := a + "-" + b
	if len(n) <= 253 {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	return n[:253-9] + "-" + hex.EncodeToString(sum[:])[:8]
}

// CopyClaim renders a claim a snapshot or restore copies a disk into: from's class (or class,
// when set), access modes and volume mode, size as the request, owned by owner.
func CopyClaim(name, vmName, class string, from *corev1.PersistentVolumeClaim, size resource.Quantity, owner metav1.OwnerReference) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       from.Namespace,
			Labels:          map[string]string{LabelVMName: vmName, vmv1.LabelManagedBy: vmv1.ManagedBy},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      append([]corev1.PersistentVolumeAccessMode(nil), from.Spec.AccessModes...),
			StorageClassName: from.Spec.StorageClassName,
			VolumeMode:       from.Spec.VolumeMode,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if class != "" {
		c.Spec.StorageClassName = ptr.To(class)
	}
	return c
}

// ClaimSize is a claim's capacity, or its request while it is unbound.
func ClaimSize(c *corev1.PersistentVolumeClaim) resource.Quantity {
	if q, ok := c.Status.Capacity[corev1.ResourceStorage]; ok {
		return q
	}
	return c.Spec.Resources.Requests[corev1.ResourceStorage]
}
