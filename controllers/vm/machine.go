package vm

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// pinMachine records the machine type a QEMU guest first ran with, once: what its runner
// reports with the guest's start (the pod's guest-machine annotation, pc-q35-10.0 from a runner
// image with QEMU 10.0). Every later runner pod is given it (podspec), so a migration target or
// a restart on a newer QEMU builds the same hardware. The runner's word, not the node's: a VM may
// name a runner image whose QEMU is not the node agent's. A runner from before the report (a
// start written without a machine) is pinned from the QEMU the node agent reports for the node
// (7.2.22: pc-q35-7.2), once that report is there: its arrival is an event (setup.go watches
// HypervisorNodes), as the annotation's is.
func (r *Reconciler) pinMachine(ctx context.Context, s *scope) error {
	st := &s.next.Status
	if st.Machine != "" || s.vm.Spec.Provider != vmv1.ProviderQEMU || s.pod.Spec.NodeName == "" {
		return nil
	}
	if m := s.pod.Annotations[vmv1.AnnotationGuestMachine]; vmv1.MachineType.MatchString(m) && m != "q35" {
		st.Machine = m
		return nil
	}
	if s.pod.Annotations[vmv1.AnnotationGuestStarted] == "" {
		return nil // not started, or its start not yet written: the machine comes with it
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
