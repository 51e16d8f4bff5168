package vm

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// pinMachine records the machine type a QEMU guest first ran with, once: the versioned q35 of
// the QEMU its node agent reports for the node (7.2.22: pc-q35-7.2). Every later runner pod is
// given it (podspec), so a migration target or a restart on a node with a newer QEMU builds the
// same hardware. A node with no report yet leaves it for a later reconcile: the report's
// arrival is an event (setup.go watches HypervisorNodes).
func (r *Reconciler) pinMachine(ctx context.Context, s *scope) error {
	st := &s.next.Status
	if st.Machine != "" || s.vm.Spec.Provider != vmv1.ProviderQEMU || s.pod.Spec.NodeName == "" {
		return nil
	}
	hn := &vmv1.HypervisorNode{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: s.pod.Spec.NodeName}, hn); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return r.fail("get-hypervisornode", err)
	}
	st.Machine = machineOf(hn)
	return nil
}

// machineOf is the machine type the node's QEMU gives q35 ("" when it reports no version).
func machineOf(hn *vmv1.HypervisorNode) string {
	for _, p := range hn.Status.Providers {
		if p.Name == vmv1.ProviderQEMU && p.Available {
			return vmv1.MachineForQEMU(p.Version)
		}
	}
	return ""
}
