package vm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// guestRunning is a runner whose startup probe passed: the guest runs.
func guestRunning(s *corev1.PodStatus) {
	running(s)
	s.ContainerStatuses[0].Started = ptr.To(true)
}

// annotatePod sets (or, with nil, removes) a pod annotation as a node agent does.
func annotatePod(t *testing.T, pod *corev1.Pod, key string, v any) {
	t.Helper()
	body := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%s}}}`, key, jsonOf(v))
	if err := env.Client.Patch(context.Background(), pod, client.RawPatch(types.MergePatchType, body)); err != nil {
		t.Fatal(err)
	}
}

func jsonOf(v any) string {
	if v == nil {
		return "null"
	}
	return fmt.Sprintf("%q", v)
}

func suspendCondition(t *testing.T, v *vmv1.VirtualMachine, phase vmv1.Phase, status metav1.ConditionStatus, reason, words string) *vmv1.VirtualMachine {
	t.Helper()
	got := condition(t, v, phase, vmv1.ConditionSuspended, status, reason)
	if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionSuspended); !strings.Contains(c.Message, words) {
		t.Fatalf("Suspended says %q, want %q", c.Message, words)
	}
	return got
}

// TestSuspendAndResume: spec.suspend asks the running pod's node agent to save the guest; the
// agent's failure shows and the guest runs on; the runner's suspended end becomes
// status.suspendedState with the pod removed (phase Suspended, no pod made however often the VM
// is reconciled); spec.suspend false starts a pod that resumes from the state, which is
// consumed once its guest runs; a run request later than a saved state discards it.
func TestSuspendAndResume(t *testing.T) {
	ns := namespace(t)
	created := podCreations(t, ns)
	v := suspendableVM(t, ns, "parked")
	pod := waitPod(t, v, "")
	if !podspec.CanSuspend(pod) || podspec.ResumedFrom(pod) {
		t.Fatalf("first pod's runner args %v: want --suspend-to, no --resume-from", pod.Spec.Containers[0].Args)
	}
	bind(t, pod, "node-a")
	kubelet(t, pod, guestRunning)
	condition(t, v, vmv1.PhaseRunning, vmv1.ConditionReady, metav1.ConditionTrue, "GuestRunning")
	if c := meta.FindStatusCondition(getVM(t, v).Status.Conditions, vmv1.ConditionSuspended); c != nil {
		t.Fatalf("Suspended before any was asked: %+v", c)
	}

	// Asked: the pod is marked for its agent, once.
	patchSpec(t, v, map[string]any{"suspend": true})
	eventually(t, "the suspend request on the pod", func() error {
		p, err := runnerPod(v)
		if err != nil || p.Annotations[vmv1.AnnotationSuspend] != "true" {
			return fmt.Errorf("annotations %v, %v", p.Annotations, err)
		}
		return nil
	})
	suspendCondition(t, v, vmv1.PhaseRunning, metav1.ConditionFalse, vmv1.ReasonSuspending, "runner pod parked-runner is saving the guest's state to claim parked-state")
	waitEvent(t, v, "Normal Suspending: Suspending the guest by vmctl (spec.suspend): runner pod parked-runner saves its state to claim parked-state")

	// The agent's failure: the guest runs on, and the condition and an event say why.
	annotatePod(t, pod, vmv1.AnnotationSuspendError, "--suspend-to: no space left on device")
	suspendCondition(t, v, vmv1.PhaseRunning, metav1.ConditionFalse, vmv1.ReasonSuspendFailed, "no space left on device; the guest runs on")
	waitEvent(t, v, "Warning SuspendFailed")

	// The runner saved the guest and ended.
	kubelet(t, pod, ended(0, "Completed", vmv1.MessageSuspended+vmv1.StateFile))
	got := suspendCondition(t, v, vmv1.PhaseSuspended, metav1.ConditionTrue, vmv1.ReasonSuspended, "saved on claim parked-state (runner pod parked-runner on node node-a")
	if st := got.Status.SuspendedState; st == nil || st.ClaimName != "parked-state" || st.PodName != "parked-runner" || st.Node != "node-a" || st.SavedAt.IsZero() {
		t.Fatalf("suspendedState %+v", st)
	}
	if got.Status.PodUID != "" || got.Status.RestartCount != 0 {
		t.Fatalf("after the suspend: podUID %q, restartCount %d", got.Status.PodUID, got.Status.RestartCount)
	}
	gone(t, v) // an ended pod goes at once
	stillNoPod(t, v)
	condition(t, v, vmv1.PhaseSuspended, vmv1.ConditionReady, metav1.ConditionFalse, vmv1.ReasonSuspended)
	waitEvent(t, v, "Normal Suspended: Suspended: the guest's state is saved on claim parked-state")
	if n := created(); n != 1 {
		t.Fatalf("%d runner pods made, want 1", n)
	}

	// Resume: a new pod loads the state; once its guest runs the state is consumed.
	patchSpec(t, v, map[string]any{"suspend": false})
	resumer := waitPod(t, v, pod.UID)
	if !podspec.ResumedFrom(resumer) || !podspec.CanSuspend(resumer) {
		t.Fatalf("resume pod's runner args %v: want --resume-from and --suspend-to", resumer.Spec.Containers[0].Args)
	}
	if _, asked := resumer.Annotations[vmv1.AnnotationSuspend]; asked {
		t.Fatal("the resume pod is asked to suspend")
	}
	waitEvent(t, v, "Normal Resuming: Resuming the guest by vmctl in runner pod parked-runner from the state saved on claim parked-state")
	bind(t, resumer, "node-a")
	kubelet(t, resumer, running) // the runner is up, QEMU loads the state
	suspendCondition(t, v, vmv1.PhaseRunning, metav1.ConditionFalse, vmv1.ReasonResuming, "runner pod parked-runner is loading the state saved on claim parked-state")
	kubelet(t, resumer, guestRunning)
	eventually(t, "the state consumed", func() error {
		g := getVM(t, v)
		if g.Status.SuspendedState != nil || meta.FindStatusCondition(g.Status.Conditions, vmv1.ConditionSuspended) != nil {
			return fmt.Errorf("status %+v", g.Status)
		}
		return nil
	})
	waitEvent(t, v, "Normal Resumed: Resumed: the guest continues in runner pod parked-runner")
	if g := getVM(t, v); g.Status.RestartCount != 0 || g.Status.UserRestartCount != 0 {
		t.Fatalf("a resume counted as a restart: %d, %d", g.Status.RestartCount, g.Status.UserRestartCount)
	}

	// Suspended again, then a run request later than the state: the guest boots afresh.
	patchSpec(t, v, map[string]any{"suspend": true})
	eventually(t, "the second suspend request", func() error {
		p, err := runnerPod(v)
		if err != nil || p.Annotations[vmv1.AnnotationSuspend] != "true" {
			return fmt.Errorf("annotations %v, %v", p.Annotations, err)
		}
		return nil
	})
	kubelet(t, resumer, ended(0, "Completed", vmv1.MessageSuspended+vmv1.StateFile))
	suspendCondition(t, v, vmv1.PhaseSuspended, metav1.ConditionTrue, vmv1.ReasonSuspended, "saved on claim parked-state")
	gone(t, v)
	clock.Advance(2e9)
	patchSpec(t, v, map[string]any{"suspend": false, "runRequestedAt": requestAt(1)})
	fresh := waitPod(t, v, resumer.UID)
	if podspec.ResumedFrom(fresh) {
		t.Fatalf("after a run request the pod resumes: %v", fresh.Spec.Containers[0].Args)
	}
	waitEvent(t, v, "StateDiscarded")
	if g := getVM(t, v); g.Status.SuspendedState != nil || g.Status.UserRestartCount != 1 {
		t.Fatalf("after the run request: suspendedState %+v, userRestartCount %d", g.Status.SuspendedState, g.Status.UserRestartCount)
	}
}

// suspendableVM creates a VM whose root disk and state are on bound claims (name-root,
// name-state), so that its guest can be suspended.
func suspendableVM(t *testing.T, ns, name string) *vmv1.VirtualMachine {
	t.Helper()
	class := storageClass(t, "suspend-immediate", storagev1.VolumeBindingImmediate)
	bound(t, claim(t, ns, name+"-root", class, corev1.PersistentVolumeFilesystem))
	bound(t, claim(t, ns, name+"-state", class, corev1.PersistentVolumeFilesystem))
	v := kubeapi.SampleVM(ns, name)
	v.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: name + "-root"}
	v.Spec.Guest.StateClaim = &vmv1.StateClaim{ClaimName: name + "-state"}
	v.Spec.Guest.NetworkMode = vmv1.NetworkMasquerade
	return create(t, v)
}

// TestResumeFailureAnnounced: a runner that cannot load the saved state ends in error; under
// runStrategy Always that end is a restart, and the reconcile that counts it (and writes status
// twice) also turns the Suspended condition to ResumeFailed. The warning event says so, once;
// the state is kept and the next pod tries to resume from it again.
func TestResumeFailureAnnounced(t *testing.T) {
	v := suspendableVM(t, namespace(t), "reload")
	pod := waitPod(t, v, "")
	bind(t, pod, "node-a")
	kubelet(t, pod, guestRunning)
	patchSpec(t, v, map[string]any{"suspend": true})
	suspendCondition(t, v, vmv1.PhaseRunning, metav1.ConditionFalse, vmv1.ReasonSuspending, "saving the guest's state")
	kubelet(t, pod, ended(0, "Completed", vmv1.MessageSuspended+vmv1.StateFile))
	suspendCondition(t, v, vmv1.PhaseSuspended, metav1.ConditionTrue, vmv1.ReasonSuspended, "saved on claim reload-state")
	gone(t, v)

	patchSpec(t, v, map[string]any{"suspend": false})
	resumer := waitPod(t, v, pod.UID)
	bind(t, resumer, "node-a")
	kubelet(t, resumer, running)
	suspendCondition(t, v, vmv1.PhaseRunning, metav1.ConditionFalse, vmv1.ReasonResuming, "loading the state saved on claim reload-state")
	clock.Advance(2e9) // the failure comes after the save, as it does in time
	kubelet(t, resumer, ended(9, "Error", "--resume-from: QEMU could not load the state"))
	got := suspendCondition(t, v, vmv1.PhaseScheduling, metav1.ConditionFalse, vmv1.ReasonResumeFailed, "could not resume from it: runner exited with code 9 (Error): --resume-from: QEMU could not load the state")
	if got.Status.RestartCount != 1 || got.Status.SuspendedState == nil {
		t.Fatalf("after the failed resume: restartCount %d, suspendedState %+v", got.Status.RestartCount, got.Status.SuspendedState)
	}
	ev := waitEvent(t, v, "Warning ResumeFailed")
	if n := strings.Count(ev, "Warning ResumeFailed"); n != 1 {
		t.Fatalf("%d ResumeFailed events, want 1:\n%s", n, ev)
	}
	if again := waitPod(t, v, resumer.UID); !podspec.ResumedFrom(again) {
		t.Fatalf("the pod after the failed resume does not resume: %v", again.Spec.Containers[0].Args)
	}
}

// gone waits until the VM has no runner pod.
func gone(t *testing.T, v *vmv1.VirtualMachine) {
	t.Helper()
	eventually(t, "no runner pod", func() error {
		if p, err := runnerPod(v); err == nil {
			return fmt.Errorf("pod %s (%s) is still there", p.Name, p.Status.Phase)
		}
		return nil
	})
}

// TestSuspendNotPossible: a pod started before the state claim was named cannot save its
// guest; the condition says to restart, and nothing is asked of the agent.
func TestSuspendNotPossible(t *testing.T) {
	ns := namespace(t)
	class := storageClass(t, "suspend-immediate", storagev1.VolumeBindingImmediate)
	bound(t, claim(t, ns, "late-root", class, corev1.PersistentVolumeFilesystem))
	bound(t, claim(t, ns, "late-state", class, corev1.PersistentVolumeFilesystem))
	v := kubeapi.SampleVM(ns, "late")
	v.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "late-root"}
	v.Spec.Guest.NetworkMode = vmv1.NetworkMasquerade
	create(t, v)
	pod := waitPod(t, v, "")
	bind(t, pod, "node-a")
	kubelet(t, pod, guestRunning)
	condition(t, v, vmv1.PhaseRunning, vmv1.ConditionReady, metav1.ConditionTrue, "GuestRunning")
	patchSpec(t, v, map[string]any{"suspend": true, "guest": map[string]any{"stateClaim": map[string]any{"claimName": "late-state"}}})
	suspendCondition(t, v, vmv1.PhaseRunning, metav1.ConditionFalse, vmv1.ReasonNotSuspendable, "restart the VM (vmctl restart) so its next runner pod mounts spec.guest.stateClaim; the guest runs on")
	if p, _ := runnerPod(v); p.Annotations[vmv1.AnnotationSuspend] != "" {
		t.Fatal("a pod without the state claim was asked to suspend")
	}
}
