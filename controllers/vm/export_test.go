package vm

import (
	"context"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Current is current for the tests against the API server (package vm_test).
func Current(ctx context.Context, server client.Reader, vm *vmv1.VirtualMachine) (bool, error) {
	return (&Reconciler{APIReader: server}).current(ctx, vm)
}
