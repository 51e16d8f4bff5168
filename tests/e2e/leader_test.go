package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// controllerLease is the lease the controller's replicas elect their leader with (manager.New's
// LeaderElectionID, in the namespace config/manager names).
var controllerLease = client.ObjectKey{Namespace: "virtpod-system", Name: "virtpod-controller.virtpod.io"}

// leaseHolder is the lease's holder identity: the replica's pod name, "_", a UUID per process.
func leaseHolder(t *testing.T) string {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := kube.Get(context.Background(), controllerLease, l); err != nil {
		t.Fatalf("lease %s: %v", controllerLease, err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// killLeader SIGKILLs the leading controller replica's process, as a node's OOM killer or a
// crash would: no lease released, so the standby takes over once the lease expires (15 s with
// the defaults the Deployment runs). It returns once a new process leads (the standby, or the
// killed pod's restarted container, whichever wins), with the takeover's time.
func killLeader(t *testing.T) time.Duration {
	t.Helper()
	ctx := context.Background()
	old := leaseHolder(t)
	podName, _, ok := strings.Cut(old, "_")
	if !ok {
		t.Fatalf("lease holder %q is not <pod>_<uuid>", old)
	}
	pod := &corev1.Pod{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: controllerLease.Namespace, Name: podName}, pod); err != nil {
		t.Fatalf("the leader's pod: %v", err)
	}
	pid := findProcess(podProcesses(pod.UID), "virtpod-contro") // comm holds 15 characters
	if pid == 0 {
		t.Fatalf("no virtpod-controller process in the leader's pod %s", podName)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	eventually(t, "a new leader", time.Minute, func() error {
		if h := leaseHolder(t); h == "" || h == old {
			return fmt.Errorf("lease held by %q", h)
		}
		return nil
	})
	took := time.Since(killed)
	t.Logf("leader %s killed; %s leads %v later", old, leaseHolder(t), took.Round(100*time.Millisecond))
	return took
}
