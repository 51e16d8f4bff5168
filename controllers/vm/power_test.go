package vm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/vm"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// The user's power requests against the real API server: runStrategy Halted, a start, and run
// requests (spec.runRequestedAt), written as vmctl writes them, a JSON merge patch under field
// manager vmctl. There is no kubelet: the tests remove a deleted pod as one would once the
// guest has powered off, and check that the controller only ever deleted it with its grace
// period.

const poweredOffMessage = "stopped on SIGTERM: guest powered off"

// patchSpec sends a JSON merge patch of the VM's spec as field manager vmctl.
func patchSpec(t *testing.T, vm *vmv1.VirtualMachine, spec map[string]any) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		t.Fatal(err)
	}
	target := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: vm.Name}}
	if err := env.Client.Patch(context.Background(), target, client.RawPatch(types.MergePatchType, body), client.FieldOwner("vmctl")); err != nil {
		t.Fatal(err)
	}
}

// requestAt is a run request time s seconds after the test clock's now, as vmctl writes it.
func requestAt(s int) string {
	return clock.Now().Add(time.Duration(s) * time.Second).UTC().Format(time.RFC3339)
}

// runningVM creates a VM with the run strategy and reports its pod running on a node.
func runningVM(t *testing.T, ns, name string, strategy vmv1.RunStrategy) (*vmv1.VirtualMachine, *corev1.Pod) {
	t.Helper()
	v := kubeapi.SampleVM(ns, name)
	v.Spec.RunStrategy = strategy
	create(t, v)
	pod := waitPod(t, v, "")
	bind(t, pod, "node-a")
	kubelet(t, pod, running)
	condition(t, v, vmv1.PhaseRunning, vmv1.ConditionReady, metav1.ConditionTrue, "GuestRunning")
	return v, pod
}

// gracefulDelete waits until the controller has deleted pod, and checks it did so with the
// pod's own grace period, the time the runner gives the guest's ACPI power-down: never a force.
func gracefulDelete(t *testing.T, v *vmv1.VirtualMachine, pod *corev1.Pod) {
	t.Helper()
	eventually(t, "pod "+pod.Name+" deleted with its grace period", func() error {
		p, err := runnerPod(v)
		if err != nil {
			return err
		}
		switch {
		case p.UID != pod.UID:
			return fmt.Errorf("another pod %s", p.UID)
		case p.DeletionTimestamp == nil:
			return fmt.Errorf("not being deleted")
		case p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != *p.Spec.TerminationGracePeriodSeconds || *p.DeletionGracePeriodSeconds == 0:
			t.Fatalf("pod deleted with grace period %v, want its own %d", p.DeletionGracePeriodSeconds, *p.Spec.TerminationGracePeriodSeconds)
		}
		return nil
	})
}

// removePod removes a deleted pod as its kubelet does once the runner has ended.
func removePod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	err := env.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func readyMessage(t *testing.T, v *vmv1.VirtualMachine, want string) {
	t.Helper()
	eventually(t, "Ready says "+want, func() error {
		c := meta.FindStatusCondition(getVM(t, v).Status.Conditions, vmv1.ConditionReady)
		if c == nil || c.Message != want {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
}

// poke changes the VM's spec (its grace period) by a merge patch, which needs no
// resourceVersion, and waits until the controller has recorded the new generation: a
// reconcile ran after it.
func poke(t *testing.T, v *vmv1.VirtualMachine) {
	t.Helper()
	grace := *getVM(t, v).Spec.TerminationGracePeriodSeconds + 1
	target := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Name}}
	body := fmt.Appendf(nil, `{"spec":{"terminationGracePeriodSeconds":%d}}`, grace)
	if err := env.Client.Patch(context.Background(), target, client.RawPatch(types.MergePatchType, body)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "status records the edit", func() error {
		if st := getVM(t, v).Status; st.ObservedGeneration < target.Generation {
			return fmt.Errorf("observedGeneration %d, want %d", st.ObservedGeneration, target.Generation)
		}
		return nil
	})
}

// stillNoPod makes the controller reconcile the VM and checks that it made no runner pod.
func stillNoPod(t *testing.T, v *vmv1.VirtualMachine) {
	t.Helper()
	poke(t, v)
	noPod(t, v)
}

// TestStopAndStart: Halted powers the guest down through the pod's grace period (Stopping),
// ends in Stopped once the pod is gone, keeps how the guest took it, starts nothing however
// often the VM is reconciled, and a start makes a new pod at once; no restart is counted.
func TestStopAndStart(t *testing.T) {
	ns := namespace(t)
	created := podCreations(t, ns)
	v, pod := runningVM(t, ns, "power", "")

	patchSpec(t, v, map[string]any{"runStrategy": "Halted"})
	gracefulDelete(t, v, pod)
	condition(t, v, vmv1.PhaseStopping, vmv1.ConditionReady, metav1.ConditionFalse, vmv1.ReasonStopping)
	readyMessage(t, v, "runStrategy is Halted: powering the guest down")
	waitEvent(t, v, "Normal Stopping: Powering the guest down by vmctl (runStrategy Halted): runner pod power-runner deleted with its grace period; the guest has 30s to power off")

	// The runner powers the guest down and exits; the kubelet reports it, then removes the pod.
	kubelet(t, pod, ended(0, "Completed", poweredOffMessage))
	eventually(t, "lastTermination tells how the guest powered off", func() error {
		if lt := getVM(t, v).Status.LastTermination; lt == nil || lt.ExitCode != 0 || lt.Message != poweredOffMessage {
			return fmt.Errorf("lastTermination %+v", lt)
		}
		return nil
	})
	removePod(t, pod)
	got := condition(t, v, vmv1.PhaseStopped, vmv1.ConditionReady, metav1.ConditionFalse, vmv1.ReasonHalted)
	readyMessage(t, v, "runStrategy is Halted: vmctl start power starts it")
	if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionScheduled); c == nil || c.Reason != vmv1.ReasonHalted {
		t.Errorf("Scheduled %+v, want reason Halted", c)
	}
	if got.Status.PodUID != "" || got.Status.Node != "" || got.Status.RestartCount != 0 || got.Status.UserRestartCount != 0 {
		t.Errorf("a stop is not a restart, and a Stopped VM names no pod: %+v", got.Status)
	}
	if meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionImagesCurrent) != nil {
		t.Errorf("ImagesCurrent kept without a pod")
	}
	waitEvent(t, v, "Normal Stopped: Stopped by vmctl (runStrategy Halted)")
	stillNoPod(t, v)
	stillNoPod(t, v)

	patchSpec(t, v, map[string]any{"runStrategy": "Always"})
	next := waitPod(t, v, pod.UID)
	waitEvent(t, v, "Normal Started: Started by vmctl (runStrategy Always)")
	bind(t, next, "node-a")
	kubelet(t, next, running)
	got = condition(t, v, vmv1.PhaseRunning, vmv1.ConditionReady, metav1.ConditionTrue, "GuestRunning")
	if got.Status.RestartCount != 0 || got.Status.UserRestartCount != 0 || got.Status.PodUID != string(next.UID) {
		t.Errorf("after the start: %+v", got.Status)
	}
	if n := created(); n != 2 {
		t.Errorf("%d runner pods created for a run, a stop and a start; want 2", n)
	}
	if ev := events(t, v); strings.Count(ev, "Normal Stopped:") != 1 || strings.Count(ev, "Normal Started:") != 1 {
		t.Errorf("want one Stopped and one Started event:\n%s", ev)
	}
}

// TestStopWhileStartingAndStartWhileStopping: a stop of a guest still starting deletes its pod
// the same way; a start before the old pod is gone waits for it, says so, and then starts a
// new pod without a back-off or a counted restart. A pod not yet on a node goes at once.
func TestStopWhileStartingAndStartWhileStopping(t *testing.T) {
	ns := namespace(t)
	v := create(t, kubeapi.SampleVM(ns, "flip"))
	pod := waitPod(t, v, "")
	bind(t, pod, "node-a")
	condition(t, v, vmv1.PhaseStarting, vmv1.ConditionScheduled, metav1.ConditionTrue, "Scheduled")

	patchSpec(t, v, map[string]any{"runStrategy": "Halted"})
	gracefulDelete(t, v, pod)
	condition(t, v, vmv1.PhaseStopping, vmv1.ConditionReady, metav1.ConditionFalse, vmv1.ReasonStopping)
	patchSpec(t, v, map[string]any{"runStrategy": "Manual"})
	readyMessage(t, v, "runStrategy is Manual again: the guest starts again once its old runner pod is gone")
	if p, err := runnerPod(v); err != nil || p.UID != pod.UID {
		t.Fatalf("a second pod while the first still stops: %v", err)
	}
	removePod(t, pod)
	next := waitPod(t, v, pod.UID)
	waitEvent(t, v, "Normal Started: Started by vmctl (runStrategy Manual)")
	got := condition(t, v, vmv1.PhaseScheduling, vmv1.ConditionScheduled, metav1.ConditionFalse, "WaitingForScheduler")
	if got.Status.RestartCount != 0 || got.Status.UserRestartCount != 0 || got.Status.PodUID != string(next.UID) {
		t.Errorf("a stop and a start are not restarts: %+v", got.Status)
	}

	// Not yet on a node: the API server deletes the pod at once, nothing runs to power down.
	patchSpec(t, v, map[string]any{"runStrategy": "Halted"})
	condition(t, v, vmv1.PhaseStopped, vmv1.ConditionReady, metav1.ConditionFalse, vmv1.ReasonHalted)
	noPod(t, v)
}

// TestRestartRequest: a run request while the guest waits out a crash back-off starts it at
// once, met by the new pod and not counted; a request on a running guest powers it down through
// its pod's grace period and boots it in a new pod, counted apart from crash restarts, once.
func TestRestartRequest(t *testing.T) {
	ns := namespace(t)
	v, pod := runningVM(t, ns, "again", "")
	// Two crashes: the second restart waits 10 s, which the test clock never lets pass.
	for n := int32(1); n <= 2; n++ {
		kubelet(t, pod, ended(1, "Error", "guest panicked"))
		if n == 2 {
			break
		}
		pod = waitPod(t, v, pod.UID)
		bind(t, pod, "node-a")
		kubelet(t, pod, running)
		condition(t, v, vmv1.PhaseRunning, vmv1.ConditionReady, metav1.ConditionTrue, "GuestRunning")
	}
	condition(t, v, vmv1.PhasePending, vmv1.ConditionReady, metav1.ConditionFalse, vmv1.ReasonRestartBackoff)
	first := requestAt(1)
	patchSpec(t, v, map[string]any{"runRequestedAt": first})
	pod = waitPod(t, v, pod.UID)
	if got := pod.Annotations[vm.AnnotationRunRequest]; got != first {
		t.Errorf("pod made for request %q, want %q", got, first)
	}
	bind(t, pod, "node-a")
	kubelet(t, pod, running)
	got := condition(t, v, vmv1.PhaseRunning, vmv1.ConditionReady, metav1.ConditionTrue, "GuestRunning")
	if got.Status.RestartCount != 2 || got.Status.UserRestartCount != 0 || got.Status.LastRunRequest == nil || got.Status.LastRunRequest.UTC().Format(time.RFC3339) != first {
		t.Fatalf("a request met by the restart under way is not a user restart: %+v", got.Status)
	}

	second := requestAt(2)
	patchSpec(t, v, map[string]any{"runRequestedAt": second})
	gracefulDelete(t, v, pod)
	readyMessage(t, v, "restarting as asked at "+second+" (runRequestedAt): the guest is shutting down, then it boots in a new runner pod")
	got = getVM(t, v)
	if got.Status.RestartCount != 2 || got.Status.UserRestartCount != 1 || got.Status.LastRunRequest.UTC().Format(time.RFC3339) != second {
		t.Fatalf("user restart not counted apart: %+v", got.Status)
	}
	waitEvent(t, v, "Normal Restarted: Restarted by vmctl (runRequestedAt "+second+"): the guest powers down, then boots in a new runner pod (user restart 1)")
	removePod(t, pod)
	next := waitPod(t, v, pod.UID) // at once: no back-off, whatever the crashes before
	if next.Annotations[vm.AnnotationRunRequest] != second {
		t.Errorf("new pod made for request %q, want %q", next.Annotations[vm.AnnotationRunRequest], second)
	}
	bind(t, next, "node-a")
	kubelet(t, next, running)
	got = condition(t, v, vmv1.PhaseRunning, vmv1.ConditionReady, metav1.ConditionTrue, "GuestRunning")
	if got.Status.RestartCount != 2 || got.Status.UserRestartCount != 1 || got.Status.PodUID != string(next.UID) {
		t.Fatalf("after the restart: %+v", got.Status)
	}

	// An older time is no new request; the guest keeps running in the same pod.
	patchSpec(t, v, map[string]any{"runRequestedAt": first})
	poke(t, v)
	if p, err := runnerPod(v); err != nil || p.UID != next.UID || p.DeletionTimestamp != nil {
		t.Fatalf("an old request restarted the guest: %v", err)
	}
	if ev := events(t, v); strings.Count(ev, "Normal Restarted:") != 1 {
		t.Errorf("want exactly one Restarted event:\n%s", ev)
	}
}

// TestRunRequestStartsEndedRun: under RerunOnFailure, Once and Manual a run that ended stays
// ended until a run request starts a new one, whether its pod is kept or gone.
func TestRunRequestStartsEndedRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		strategy vmv1.RunStrategy
		code     int32
		phase    vmv1.Phase
		podGone  bool
	}{
		{"powered off under RerunOnFailure", vmv1.RunRerunOnFailure, 0, vmv1.PhaseSucceeded, false},
		{"failed under Once", vmv1.RunOnce, 1, vmv1.PhaseFailed, false},
		{"powered off under Manual, its pod removed", vmv1.RunManual, 0, vmv1.PhaseSucceeded, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t)
			v, pod := runningVM(t, ns, "ended", tc.strategy)
			kubelet(t, pod, ended(tc.code, "Done", "the guest ended"))
			condition(t, v, tc.phase, vmv1.ConditionReady, metav1.ConditionFalse, map[vmv1.Phase]string{
				vmv1.PhaseSucceeded: vmv1.ReasonGuestStopped, vmv1.PhaseFailed: vmv1.ReasonRunnerFailed}[tc.phase])
			if tc.podGone {
				removePod(t, pod)
				eventually(t, "the ended run lets go of its pod", func() error {
					if st := getVM(t, v).Status; st.PodUID != "" || st.Phase != tc.phase {
						return fmt.Errorf("status %+v", st)
					}
					return nil
				})
			}
			stillNoPodOr(t, v, pod, tc.podGone)

			at := requestAt(3)
			patchSpec(t, v, map[string]any{"runRequestedAt": at})
			next := waitPod(t, v, pod.UID)
			waitEvent(t, v, fmt.Sprintf("Normal Started: Started by vmctl (runRequestedAt %s): a new run after the last one ended (runStrategy %s, user restart 1)", at, tc.strategy))
			bind(t, next, "node-a")
			kubelet(t, next, running)
			got := condition(t, v, vmv1.PhaseRunning, vmv1.ConditionReady, metav1.ConditionTrue, "GuestRunning")
			if got.Status.RestartCount != 0 || got.Status.UserRestartCount != 1 {
				t.Errorf("status %+v", got.Status)
			}
		})
	}
}

// stillNoPodOr checks, after a reconcile, that an ended run got no new pod: its ended pod is
// kept, or none is there.
func stillNoPodOr(t *testing.T, v *vmv1.VirtualMachine, ended *corev1.Pod, gone bool) {
	t.Helper()
	if gone {
		stillNoPod(t, v)
		return
	}
	poke(t, v)
	if p, err := runnerPod(v); err != nil || p.UID != ended.UID {
		t.Fatalf("the ended run's pod was not kept: %v", err)
	}
}

// TestHaltedWinsOverRunRequests: a VM created Halted never gets a pod, a run request does not
// change that, and the start that follows makes one pod, the request met by it, uncounted.
func TestHaltedWinsOverRunRequests(t *testing.T) {
	ns := namespace(t)
	created := podCreations(t, ns)
	v := kubeapi.SampleVM(ns, "halted")
	v.Spec.RunStrategy = vmv1.RunHalted
	create(t, v)
	condition(t, v, vmv1.PhaseStopped, vmv1.ConditionReady, metav1.ConditionFalse, vmv1.ReasonHalted)
	at := requestAt(4)
	patchSpec(t, v, map[string]any{"runRequestedAt": at})
	stillNoPod(t, v)
	patchSpec(t, v, map[string]any{"runStrategy": "Always"})
	pod := waitPod(t, v, "")
	eventually(t, "the pod in status", func() error {
		if st := getVM(t, v).Status; st.PodUID != string(pod.UID) || st.UserRestartCount != 0 || st.LastRunRequest == nil ||
			st.LastRunRequest.UTC().Format(time.RFC3339) != at {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	if n := created(); n != 1 {
		t.Errorf("%d pods created, want 1", n)
	}
}
