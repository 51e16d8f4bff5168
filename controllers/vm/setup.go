package vm

import (
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// SetupWithManager registers the controller: VirtualMachines and the pods they own drive it,
// nothing polls.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, workers int, skipNameValidation bool) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("virtualmachine").
		For(&vmv1.VirtualMachine{}).
		Owns(&corev1.Pod{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers, SkipNameValidation: &skipNameValidation}).
		Complete(r)
}
