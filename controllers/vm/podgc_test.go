package vm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestPodGCFailsTerminatingPod: a pod evicted from an unreachable node sits Terminating; when
// the node is deleted PodGC marks it Failed (DisruptionTarget) and then removes it. A
// reconcile that sees the pod between those two writes, Terminating and Failed, must record
// the end with the phase: under runStrategy Once the VM stays Failed and says why, even after
// the pod is gone. (tests/faults TestNodeLoss once saw Failed with no lastTermination.)
func TestPodGCFailsTerminatingPod(t *testing.T) {
	v, pod := runningVM(t, namespace(t), "gced", vmv1.RunOnce)
	// The taint manager's eviction: graceful, so the pod stays while no kubelet confirms it.
	if err := env.Client.Delete(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	const msg = "PodGC: node no longer exists"
	kubelet(t, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodFailed
		s.Conditions = append(s.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "DeletionByPodGC", Message: msg, LastTransitionTime: metav1.Now()})
	})
	got := condition(t, v, vmv1.PhaseFailed, vmv1.ConditionReady, metav1.ConditionFalse, vmv1.ReasonRunnerFailed)
	if lt := got.Status.LastTermination; lt == nil || lt.Reason != "DeletionByPodGC" || lt.Message != msg {
		t.Fatalf("Failed while the pod is Terminating, last termination %+v; want PodGC's reason", lt)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionReady); !strings.Contains(c.Message, msg) {
		t.Errorf("Ready message %q does not say why", c.Message)
	}
	removePod(t, pod) // PodGC's delete, grace period 0
	eventually(t, "the pod let go of, the end kept", func() error {
		got = getVM(t, v)
		if got.Status.PodUID != "" {
			return fmt.Errorf("status still names pod %s", got.Status.PodUID)
		}
		return nil
	})
	if lt := got.Status.LastTermination; got.Status.Phase != vmv1.PhaseFailed || got.Status.RestartCount != 0 || lt == nil || lt.Reason != "DeletionByPodGC" {
		t.Fatalf("after the pod went: phase %s, %d restarts, last termination %+v", got.Status.Phase, got.Status.RestartCount, lt)
	}
	ev := waitEvent(t, v, "Warning Failed: Guest failed and runStrategy is Once")
	if strings.Count(ev, "Warning Failed") != 1 {
		t.Fatalf("want exactly one Failed event:\n%s", ev)
	}
	stillNoPod(t, v)
}
