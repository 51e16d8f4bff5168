package podcontrol

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Anyone who may create a pod may give it virtpod's labels, an owner reference and the
// migration annotations. What only the controller writes is a VirtualMachine's status (the
// status subresource) and a VirtualMachineMigration's: the agent acts on a pod only when those
// name it.

// Owner is what the controller's objects say a pod is.
type Owner struct {
	VM *vmv1.VirtualMachine
	// Migration is the live migration the pod takes part in, when one names it: as its target
	// (Target) or, for the VM's own pod, as its source.
	Migration *vmv1.VirtualMachineMigration
	Target    bool
}

// Refusal is a pod the controller's objects do not vouch for. It says nothing of other pods
// or VMs, so it may be logged as is.
type Refusal struct{ msg string }

func (r *Refusal) Error() string { return r.msg }

func refuse(pod *corev1.Pod, format string, a ...any) error {
	return &Refusal{fmt.Sprintf("pod %s/%s: ", pod.Namespace, pod.Name) + fmt.Sprintf(format, a...) + ": the node agent acts only for pods the controller made"}
}

// Authorize says whose pod is: the VirtualMachine controlling it (its controller owner
// reference, matched by UID) must name it by UID in status.podUID, or a live
// VirtualMachineMigration of that VM whose UID the pod's vm.virtpod.io/migration annotation
// holds must name it in status.targetPod. Anything else is a *Refusal; other errors are the
// API server's. c reads uncached: a decision is never older than the request.
func Authorize(ctx context.Context, c client.Reader, pod *corev1.Pod) (Owner, error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "VirtualMachine" {
		return Owner{}, refuse(pod, "not controlled by a VirtualMachine")
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != vmv1.GroupVersion.Group {
		return Owner{}, refuse(pod, "not controlled by a VirtualMachine")
	}
	vm := &vmv1.VirtualMachine{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}, vm); apierrors.IsNotFound(err) {
		return Owner{}, refuse(pod, "its VirtualMachine %s does not exist", ref.Name)
	} else if err != nil {
		return Owner{}, fmt.Errorf("reading VirtualMachine %s/%s: %w", pod.Namespace, ref.Name, err)
	}
	if vm.UID != ref.UID {
		return Owner{}, refuse(pod, "its owner reference names another VirtualMachine %s than the one that exists", ref.Name)
	}
	o := Owner{VM: vm}
	if uid := pod.Annotations[vmv1.AnnotationMigration]; uid != "" {
		mig, err := migration(ctx, c, pod.Namespace, vm.Name, types.UID(uid))
		if err != nil {
			return Owner{}, err
		}
		switch {
		case mig != nil && mig.Status.TargetPod == pod.Name:
			// A target pod is not yet in the VM's status: the migration names it.
			return Owner{VM: vm, Migration: mig, Target: true}, nil
		case mig != nil && mig.Status.SourcePod == pod.Name:
			o.Migration = mig
		}
	}
	if vm.Status.PodUID != string(pod.UID) || vm.Status.PodName != pod.Name {
		return Owner{}, refuse(pod, "neither VirtualMachine %s's runner pod (its status) nor the target of a live migration of it", vm.Name)
	}
	return o, nil
}

// migration is the live (not ended) VirtualMachineMigration of vm with uid, or nil.
func migration(ctx context.Context, c client.Reader, namespace, vm string, uid types.UID) (*vmv1.VirtualMachineMigration, error) {
	list := &vmv1.VirtualMachineMigrationList{}
	if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing VirtualMachineMigrations in %s: %w", namespace, err)
	}
	for i := range list.Items {
		if m := &list.Items[i]; m.UID == uid && m.Spec.VMName == vm && !m.Status.Terminal() && m.DeletionTimestamp == nil {
			return m, nil
		}
	}
	return nil, nil
}
