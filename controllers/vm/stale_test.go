package vm_test

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/vm"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestPodFromAStaleViewIsAdopted: a live runner pod labelled with an earlier run than the VM's
// restartCount, which the server holds as the cache does, was made from a view of the VM before
// its restart was counted (CI's controller-kill test met one: a VM cache two writes behind its
// pod cache). It is this run's: relabelled and named in status, not waited on for ever as a
// cache behind the server.
func TestPodFromAStaleViewIsAdopted(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	v := create(t, kubeapi.SampleVM(ns, "stale"))
	pod := waitPod(t, v, "")
	condition(t, v, vmv1.PhaseScheduling, vmv1.ConditionScheduled, metav1.ConditionFalse, "WaitingForScheduler")
	// The server's VM as a counted restart left it (restart 1, no pod named), beside the pod
	// made for run 0.
	cur := getVM(t, v)
	counted := cur.DeepCopy()
	counted.Status.RestartCount, counted.Status.PodUID, counted.Status.Phase = 1, "", vmv1.PhasePending
	if err := env.Client.Status().Patch(ctx, counted, client.MergeFrom(cur)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod named and relabelled as run 1", func() error {
		got := getVM(t, v)
		p, err := runnerPod(v)
		if err != nil {
			return err
		}
		if got.Status.PodUID != string(pod.UID) || p.UID != pod.UID || p.Annotations[vm.AnnotationRestartCount] != "1" || got.Status.RestartCount != 1 {
			return fmt.Errorf("status names %q (restart %d), the pod %s is labelled run %q", got.Status.PodUID, got.Status.RestartCount, p.UID, p.Annotations[vm.AnnotationRestartCount])
		}
		return nil
	})
	waitEvent(t, v, "is that run's")
}
