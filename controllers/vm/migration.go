package vm

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// Live migration (controllers/migration moves the guest; docs/migration.md). After a
// move the VM's runner pod is the target pod, named in status.podName, so restarts, resizes and
// stops act on it; while one runs, this controller leaves the source pod's guest alone.

// runnerPodName is the pod of the run the VM's status describes, or, when no run is current
// (none yet, or a restart counted), the name a new runner pod gets: a guest restarted after a
// move starts again in <vm>-runner, not under its last target's name (else a lost status write
// naming the new pod would never be found again).
func runnerPodName(vm *vmv1.VirtualMachine) string {
	if vm.Status.PodName != "" && vm.Status.PodUID != "" {
		return vm.Status.PodName
	}
	return podspec.PodName(vm.Name)
}

// migrating says a migration is moving the guest out of pod: the migration controller marks the
// source pod while it runs and unmarks it when it fails (a moved guest's source pod is deleted).
func migrating(pod *corev1.Pod) bool {
	return pod.Annotations[vmv1.AnnotationMigration] != ""
}

// migrationTarget says an owned migration target pod that may still run the guest exists.
func (r *Reconciler) migrationTarget(ctx context.Context, vm *vmv1.VirtualMachine) (bool, error) {
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, client.InNamespace(vm.Namespace),
		client.MatchingLabels{podspec.LabelVMName: vm.Name, vmv1.LabelMigrationRole: vmv1.MigrationRoleTarget}); err != nil {
		return false, r.fail("list-pods", err)
	}
	for i := range list.Items {
		if p := &list.Items[i]; ownedBy(p, vm) && p.DeletionTimestamp == nil && !podEnded(p) && p.Name != vm.Status.PodName {
			return true, nil
		}
	}
	return false, nil
}
