package snapshot

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// makeClaims creates the snapshot's claims, one per disk, each like the VM's (its class unless
// spec.storageClassName names one) at the disk's size; refused is the API server's refusal.
func (r *Reconciler) makeClaims(ctx context.Context, snap *vmv1.VirtualMachineSnapshot) (refused string, err error) {
	owner := *metav1.NewControllerRef(snap, vmv1.GroupVersion.WithKind("VirtualMachineSnapshot"))
	for _, d := range snap.Status.Disks {
		from, err := r.claim(ctx, snap.Namespace, d.SourceClaim)
		if err != nil {
			return "", err
		}
		if from == nil {
			return fmt.Sprintf("claim %s of disk %s was deleted during the copy", d.SourceClaim, d.Disk), nil
		}
		c := podspec.CopyClaim(d.ClaimName, snap.Spec.VMName, snap.Spec.StorageClassName, from, *resource.NewQuantity(d.SizeBytes, resource.BinarySI), owner)
		if refused, err := r.create(ctx, c, d.Disk); refused != "" || err != nil {
			return refused, err
		}
	}
	return "", nil
}

// create makes a claim unless it exists; refused is the API server's refusal in words.
func (r *Reconciler) create(ctx context.Context, c *corev1.PersistentVolumeClaim, disk string) (refused string, err error) {
	err = r.Client.Create(ctx, c)
	switch {
	case apierrors.IsAlreadyExists(err):
		return "", nil
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
		return fmt.Sprintf("the API server refused claim %s for disk %s: %v", c.Name, disk, err), nil
	}
	return "", err
}

// ensureCopier is the snapshot's copier pod, made if it is not there yet.
func (r *Reconciler) ensureCopier(ctx context.Context, snap *vmv1.VirtualMachineSnapshot) (*corev1.Pod, error) {
	if p, err := r.pod(ctx, snap.Namespace, snap.Status.CopierPod); err != nil || p != nil {
		return p, err
	}
	image, err := r.copierImage(ctx, snap)
	if err != nil {
		return nil, err
	}
	c := podspec.Copier{
		Name: snap.Status.CopierPod, Namespace: snap.Namespace, Of: snap.Name, VMName: snap.Spec.VMName, Image: image,
		Owner: *metav1.NewControllerRef(snap, vmv1.GroupVersion.WithKind("VirtualMachineSnapshot")),
	}
	if snap.Status.SourcePod != "" {
		c.Node, c.Control, c.Args = snap.Status.SourceNode, true, []string{"disk-target", "--control-dir=" + vmv1.ControlDir}
		var base *vmv1.VirtualMachineSnapshot
		if snap.Status.Base != "" {
			base = &vmv1.VirtualMachineSnapshot{}
			if err := r.Client.Get(ctx, types.NamespacedName{Namespace: snap.Namespace, Name: snap.Status.Base}, base); err != nil {
				return nil, err // a base deleted mid-way fails the copy at its deadline at worst
			}
		}
		for i, d := range snap.Status.Disks {
			target := "--target=drive=" + controlapi.DriveOf(d.Disk) + ",file=" + podspec.CopierDisk(d.ClaimName)
			if base != nil {
				from := base.Status.Disks[i].ClaimName
				target += ",base=" + podspec.CopierDisk(from)
				c.Claims = append(c.Claims, podspec.CopierClaim{Name: from, ReadOnly: true})
			}
			c.Args = append(c.Args, target)
			c.Claims = append(c.Claims, podspec.CopierClaim{Name: d.ClaimName})
		}
	} else {
		c.Args = []string{"disk-copy"}
		for _, d := range snap.Status.Disks {
			c.Args = append(c.Args, "--copy=from="+podspec.CopierDisk(d.SourceClaim)+",to="+podspec.CopierDisk(d.ClaimName))
			c.Claims = append(c.Claims, podspec.CopierClaim{Name: d.SourceClaim, ReadOnly: true}, podspec.CopierClaim{Name: d.ClaimName})
		}
	}
	pod := podspec.CopierPod(c)
	if err := r.Client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	return pod, nil
}

// copierImage is the runner image of the VM's running pod, or else the VM's effective one.
func (r *Reconciler) copierImage(ctx context.Context, snap *vmv1.VirtualMachineSnapshot) (string, error) {
	if source, err := r.pod(ctx, snap.Namespace, snap.Status.SourcePod); err != nil {
		return "", err
	} else if source != nil {
		if img := podspec.PodImages(source).Runner; img != "" {
			return img, nil
		}
	}
	vm := &vmv1.VirtualMachine{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: snap.Namespace, Name: snap.Spec.VMName}, vm); err == nil && vm.Status.Images != nil && vm.Status.Images.Runner != "" {
		return vm.Status.Images.Runner, nil
	}
	return r.RunnerImage, nil
}

// deletePod deletes the named pod if owner made it.
func (r *Reconciler) deletePod(ctx context.Context, namespace, name string, owner types.UID) error {
	p, err := r.pod(ctx, namespace, name)
	if err != nil || p == nil || !controlledBy(p, owner) || p.DeletionTimestamp != nil {
		return err
	}
	return client.IgnoreNotFound(r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID}))
}

// deleteClaim deletes the named claim if owner made it (and owns it still).
func (r *Reconciler) deleteClaim(ctx context.Context, namespace, name string, owner types.UID) error {
	c, err := r.claim(ctx, namespace, name)
	if err != nil || c == nil || !controlledBy(c, owner) || c.DeletionTimestamp != nil {
		return err
	}
	if err := r.Client.Delete(ctx, c, client.Preconditions{UID: &c.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return err
	}
	return nil
}

func controlledBy(o metav1.Object, owner types.UID) bool {
	ref := metav1.GetControllerOf(o)
	return ref != nil && ref.UID == owner
}

func podEnded(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// terminationMessage is what the copier said when it ended (its termination message, or the
// end of its log), or the kubelet's reason.
func terminationMessage(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if t := s.State.Terminated; t != nil {
			if msg := strings.TrimSpace(t.Message); msg != "" {
				return msg
			}
			return fmt.Sprintf("exit %d (%s)", t.ExitCode, t.Reason)
		}
	}
	if p.Status.Message != "" {
		return p.Status.Message
	}
	return "no reason given"
}

// setReady sets the Ready condition of a snapshot or a restore; the one setter of it.
func setReady(conds *[]metav1.Condition, generation int64, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(conds, metav1.Condition{Type: vmv1.ConditionReady, Status: status, Reason: reason,
		Message: message, ObservedGeneration: generation})
}
