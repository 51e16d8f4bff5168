package faults

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestControlPlaneRestart: kube-apiserver and etcd stop and start again (same data, ports and
// certificates) while VMs are being created and their pods placed and started. The same
// controller process reconnects by itself: VMs created after the restart get their pods, pod
// changes after it reach their VMs' status, and nothing is made twice or restarted.
func TestControlPlaneRestart(t *testing.T) {
	const vms, restartAt = 150, 50
	s := newScene(t, "restart-1", "restart-2", "restart-3")
	c := s.startController(t)

	// Paced, so that creation goes on while the control plane is away, and after.
	ctx, cancel := context.WithCancel(context.Background())
	var created atomic.Int32
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for i := range vms {
			if !s.createVM(ctx, t, fmt.Sprintf("vm-%03d", i), nil) {
				return
			}
			created.Add(1)
			time.Sleep(40 * time.Millisecond)
		}
	}()
	for created.Load() < restartAt {
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	if err := env.Restart(nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane away %v, %d VMs created before", time.Since(start).Round(time.Millisecond), restartAt)
	<-done
	s.converged(t, vms, 2*time.Minute, nil)
	s.wantPodCounts(t, vms, 0)
	if !c.alive() {
		t.Fatal("the controller exited instead of reconnecting")
	}
}
