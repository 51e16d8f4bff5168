package vm

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

func TestRestartDelay(t *testing.T) {
	for _, tc := range []struct {
		n    int32
		want time.Duration
	}{
		{0, 0}, {1, 0}, // the first restart is immediate
		{2, 10 * time.Second}, {3, 20 * time.Second}, {4, 40 * time.Second}, {5, 80 * time.Second},
		{6, 160 * time.Second}, {7, 5 * time.Minute}, {8, 5 * time.Minute}, {1000, 5 * time.Minute},
	} {
		if got := restartDelay(tc.n); got != tc.want {
			t.Errorf("restartDelay(%d) = %s, want %s", tc.n, got, tc.want)
		}
	}
}

func TestRestartWait(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	ended := func(ago time.Duration) *vmv1.Termination {
		return &vmv1.Termination{ExitCode: 1, FinishedAt: metav1.NewTime(now.Add(-ago))}
	}
	for _, tc := range []struct {
		name     string
		restarts int32
		last     *vmv1.Termination
		want     time.Duration
	}{
		{"never restarted", 0, ended(0), 0},
		{"no termination recorded", 3, nil, 0},
		{"first restart is immediate", 1, ended(0), 0},
		{"second restart waits 10 s from the end", 2, ended(4 * time.Second), 6 * time.Second},
		{"back-off already over", 2, ended(time.Minute), -50 * time.Second},
		{"capped at 5 minutes", 20, ended(time.Minute), 4 * time.Minute},
	} {
		vm := &vmv1.VirtualMachine{Status: vmv1.VirtualMachineStatus{RestartCount: tc.restarts, LastTermination: tc.last}}
		if got := restartWait(vm, now); got != tc.want {
			t.Errorf("%s: restartWait = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestRestartsPerPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy            vmv1.RestartPolicy
		afterFailure, end bool // restarted after a failure, after a clean end
	}{
		{vmv1.RestartAlways, true, true},
		{"", true, true}, // the CRD defaults Always; an unset policy behaves the same
		{vmv1.RestartOnFailure, true, false},
		{vmv1.RestartNever, false, false},
	} {
		if got := restarts(tc.policy, true); got != tc.afterFailure {
			t.Errorf("%q after a failure: restarts = %v", tc.policy, got)
		}
		if got := restarts(tc.policy, false); got != tc.end {
			t.Errorf("%q after a clean end: restarts = %v", tc.policy, got)
		}
	}
}

func TestStopped(t *testing.T) {
	for _, tc := range []struct {
		phase  vmv1.Phase
		policy vmv1.RestartPolicy
		want   bool
	}{
		{vmv1.PhaseRunning, vmv1.RestartNever, false},
		{vmv1.PhasePending, vmv1.RestartNever, false},
		{vmv1.PhaseSucceeded, vmv1.RestartNever, true},
		{vmv1.PhaseFailed, vmv1.RestartNever, true},
		{vmv1.PhaseSucceeded, vmv1.RestartOnFailure, true},
		{vmv1.PhaseFailed, vmv1.RestartOnFailure, false},
		{vmv1.PhaseSucceeded, vmv1.RestartAlways, false},
		{vmv1.PhaseFailed, vmv1.RestartAlways, false},
	} {
		vm := &vmv1.VirtualMachine{Spec: vmv1.VirtualMachineSpec{RestartPolicy: tc.policy}, Status: vmv1.VirtualMachineStatus{Phase: tc.phase}}
		if got := stopped(vm); got != tc.want {
			t.Errorf("%s under %s: stopped = %v, want %v", tc.phase, tc.policy, got, tc.want)
		}
	}
}

// TestCounted: an ended pod other than the one in status is already counted unless it was made
// for the VM's current run.
func TestCounted(t *testing.T) {
	pod := func(annotation string) *corev1.Pod {
		p := &corev1.Pod{}
		if annotation != "" {
			p.Annotations = map[string]string{AnnotationRestartCount: annotation}
		}
		return p
	}
	for _, tc := range []struct {
		pod      *corev1.Pod
		restarts int32
		want     bool
	}{
		{pod("0"), 0, false}, // this run's pod, its status write lost: still to count
		{pod("3"), 3, false},
		{pod("2"), 3, true}, // an earlier run's pod whose delete was lost
		{pod(""), 0, true},  // made before the annotation: never taken for this run's
	} {
		if got := counted(tc.pod, &vmv1.VirtualMachine{Status: vmv1.VirtualMachineStatus{RestartCount: tc.restarts}}); got != tc.want {
			t.Errorf("pod for run %q, restartCount %d: counted = %v, want %v", tc.pod.Annotations[AnnotationRestartCount], tc.restarts, got, tc.want)
		}
	}
}
