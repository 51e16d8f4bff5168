package faults

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/virtpod/virtpod/tests/kubeapi"
)

// The lease timing the test runs its replicas with: shorter than the defaults (15 s, 10 s, 2 s),
// so a takeover costs seconds, and within what the flags allow. The renew deadline is what a
// loaded machine must not stall a leader's renewal past: at 3 s, a CI machine booting guests
// beside this test did (request timeouts, then "leader election lost"). 6 s is twice that; a
// longer stall still costs no VM its pod, since the replica exits and is restarted (replica).
const (
	leaseDuration = 8 * time.Second
	renewDeadline = 6 * time.Second
	retryPeriod   = 1 * time.Second
	leaseName     = "virtpod-controller.virtpod.io" // manager.New's LeaderElectionID
)

// TestLeaderFailover: two replicas with leader election, as the Deployment runs them, while 200
// VMs are created. The leader is SIGKILLed in the middle of making pods: the standby takes the
// lease once it expires and finishes the work. A new replica starts (the Deployment's restart)
// and the leader is then stopped as a rollout stops it (SIGTERM): it hands the lease over at
// once. A replica that exits on its own (a lost lease) is restarted, as the Deployment's kubelet
// does. In the end every VM runs in exactly one pod its status names; no pod was made twice or
// removed, so no two replicas ever acted on one VM; and a replica leads.
func TestLeaderFailover(t *testing.T) {
	const vms = 200
	s := newScene(t, "lead-1", "lead-2", "lead-3", "lead-4")
	newReplica := func() *replica {
		return s.startReplica(t, "--leader-elect", "--leader-election-namespace="+s.ns,
			"--leader-elect-lease-duration="+leaseDuration.String(), "--leader-elect-renew-deadline="+renewDeadline.String(),
			"--leader-elect-retry-period="+retryPeriod.String())
	}
	create := func(from, to int) {
		var wg sync.WaitGroup
		for i := from; i < to; i++ {
			wg.Go(func() { s.createVM(context.Background(), t, fmt.Sprintf("vm-%03d", i), nil) })
		}
		wg.Wait()
	}
	// Pods up to n made, or the time is up: the moment to strike is mid-work.
	podsMade := func(n int) {
		t.Helper()
		kubeapi.Eventually(t, fmt.Sprintf("%d pods made", n), time.Minute, func() error {
			if a, _ := s.podCounts(); a < n {
				return fmt.Errorf("%d pods made", a)
			}
			return nil
		})
	}

	first := newReplica()
	leaderA := s.leader(t, "")
	second := newReplica() // started after the first leads, so it is the standby

	create(0, vms/2)
	podsMade(20)
	made, _ := s.podCounts()
	killed := time.Now()
	first.kill()
	leaderB := s.leader(t, leaderA)
	takeover := time.Since(killed)
	// A standby polls every retry period (jittered up to 2.2×) and takes a lease not renewed
	// for its duration; the leader renewed it at most a retry period before it died.
	if limit := leaseDuration + 2*retryPeriod*22/10; takeover > limit {
		t.Errorf("the standby took the lease %v after the leader was killed, want within %v", takeover.Round(time.Millisecond), limit)
	}
	t.Logf("leader killed with %d of %d pods made: the standby leads %v later (lease %v, retry %v)", made, vms/2, takeover.Round(time.Millisecond), leaseDuration, retryPeriod)

	third := newReplica() // the killed replica's restart: a standby now
	create(vms/2, vms)
	podsMade(vms/2 + 20)
	made, _ = s.podCounts()
	stopped := time.Now()
	second.stop()
	exited := time.Now()
	leaderC := s.leader(t, leaderB)
	handover := time.Since(exited)
	if limit := 2 * retryPeriod * 22 / 10; handover > limit {
		t.Errorf("a leader stopped by SIGTERM was followed %v after it exited, want within %v: it should release the lease, not let it expire", handover.Round(time.Millisecond), limit)
	}
	t.Logf("leader stopped with %d of %d pods made: it exited %v after SIGTERM, the next leader led %v after that",
		made, vms, exited.Sub(stopped).Round(time.Millisecond), handover.Round(time.Millisecond))
	if leaderC == leaderA {
		t.Errorf("the killed leader's identity %s leads again; want the restarted replica's own", leaderA)
	}

	s.converged(t, vms, 2*time.Minute, nil)
	s.wantPodCounts(t, vms, 0)
	s.leader(t, "")
	for name, r := range map[string]*replica{"first": first, "second": second, "third": third} {
		if restarts := r.Restarts(); len(restarts) > 0 {
			// Not a failure: a replica that cannot renew its lease in time must stop leading.
			t.Logf("the %s replica exited on its own and was restarted at %v", name, restarts)
		}
	}
}

// leader waits until the lease has a holder other than not, and returns it.
func (s *scene) leader(t *testing.T, not string) string {
	t.Helper()
	var holder string
	kubeapi.Eventually(t, "a leader other than "+fmt.Sprintf("%q", not), time.Minute, func() error {
		l := &coordinationv1.Lease{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: leaseName}, l); err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || *l.Spec.HolderIdentity == not {
			return fmt.Errorf("lease held by %v", l.Spec.HolderIdentity)
		}
		holder = *l.Spec.HolderIdentity
		return nil
	})
	return holder
}
