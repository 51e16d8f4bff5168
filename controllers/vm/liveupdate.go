package vm

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/migratable"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// wantsLiveUpdate says a running guest should move onto its new runner image now: the VM asked
// for it (imageUpdatePolicy LiveMigrate), the runner image is all that changed (a new kernel or
// root-disk image needs a boot, so those wait for the next start), the guest can move, and no
// migration moves it already. Pure.
func wantsLiveUpdate(vm *vmv1.VirtualMachine, pod *corev1.Pod, images vmv1.Images, movable *migratable.Verdict) bool {
	have := podspec.PodImages(pod)
	return vm.Spec.ImageUpdatePolicy == vmv1.ImageUpdateLiveMigrate &&
		have.Runner != images.Runner && have.Kernel == images.Kernel && have.RootDisk == images.RootDisk &&
		movable != nil && movable.OK() && !migrating(pod)
}

// liveUpdate makes the migration that moves the guest onto its new runner image, when
// wantsLiveUpdate: named by the VM and the image, so it is made once per image (a failed one
// stays, the record of why, until deleted); the migration controller builds its target pod on
// the VM's effective runner image. Its end changes the VM's runner pod, which reconciles again.
func (r *Reconciler) liveUpdate(ctx context.Context, s *scope) error {
	// The migration controller builds the target on status.images: the status as read must
	// name the new image already (the write that records it brings the next reconcile).
	if !wantsLiveUpdate(s.vm, s.pod, s.images, s.movable) || s.vm.Status.Images == nil || *s.vm.Status.Images != s.images {
		return nil
	}
	mig := &vmv1.VirtualMachineMigration{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.vm.Namespace, Name: vmv1.ImageUpdateMigrationName(s.vm.Name, s.images.Runner),
			Labels: map[string]string{vmv1.LabelImageUpdate: s.vm.Name},
		},
		Spec: vmv1.VirtualMachineMigrationSpec{VMName: s.vm.Name},
	}
	if err := r.Client.Create(ctx, mig); apierrors.IsAlreadyExists(err) {
		return nil
	} else if err != nil {
		return r.fail("create-update-migration", err)
	}
	r.Recorder.Eventf(s.vm, mig, corev1.EventTypeNormal, "ImagesChanged", "LiveUpdate",
		"Moving the guest onto runner image %s by live migration %s (imageUpdatePolicy LiveMigrate), without a reboot", s.images.Runner, mig.Name)
	return nil
}
