package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestTenSmallVMsRunning: with the controller's default resources (CPU requested at cpus/10, the
// measured memory overhead), ten small emulated VMs applied at once all fit the 2-core node and
// reach Running. Before the allocation ratio, a second 1-vCPU VM stayed Scheduling ("Insufficient
// cpu"). make bench-many measures how many fit and how fast.
func TestTenSmallVMsRunning(t *testing.T) {
	const n = 10
	ctx := context.Background()
	ns := namespace(t)
	// Earlier tests' pods may still be shutting down: wait until their requests leave room.
	eventually(t, fmt.Sprintf("room for %d small VMs on the node", n), 3*time.Minute, func() error {
		if fit := nodeHolds(t, smallVM(ns, "probe")); fit < n {
			return fmt.Errorf("the node holds %d by requests", fit)
		}
		return nil
	})
	for i := range n {
		mustCreate(t, smallVM(ns, fmt.Sprintf("small-%02d", i)))
	}
	eventually(t, fmt.Sprintf("%d VMs Running", n), 5*time.Minute, func() error {
		var list vmv1.VirtualMachineList
		if err := kube.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		running := 0
		for _, vm := range list.Items {
			if vm.Status.Phase == vmv1.PhaseRunning {
				running++
			}
		}
		if running < n {
			return fmt.Errorf("%d of %d Running", running, n)
		}
		return nil
	})
	// Gone before the next test (and the uninstall's orphan check) counts the node's room.
	deleteAllVMs(t, ns)
}
