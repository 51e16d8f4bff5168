package vm

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// withArgs gives the pod a runner container (with a startup probe) and these arguments.
func withArgs(args ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Containers = []corev1.Container{{Name: vmv1.RunnerContainer, Args: args, StartupProbe: &corev1.Probe{}}}
	}
}

// TestSuspended: the Suspended condition in each state of a suspend and a resume, set and
// cleared, each message naming what a user can do.
func TestSuspended(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	state := &vmv1.SuspendedState{ClaimName: "web-state", SavedAt: metav1.NewTime(t0), PodName: "web-runner", Node: "node-a"}
	canSuspend := withArgs("--name=web", podspec.SuspendFlag+"="+vmv1.StateFile)
	resuming := withArgs("--name=web", podspec.SuspendFlag+"="+vmv1.StateFile, podspec.ResumeFlag+"="+vmv1.StateFile)
	agentFailed := func(p *corev1.Pod) {
		p.Annotations = map[string]string{vmv1.AnnotationSuspend: "true", vmv1.AnnotationSuspendError: "--suspend-to: no space left on device"}
	}
	badResume := &vmv1.Termination{ExitCode: 9, Reason: "Error", Message: "--resume-from: QEMU could not load the state", FinishedAt: metav1.NewTime(t0.Add(time.Minute))}
	oldFailure := &vmv1.Termination{ExitCode: 1, Reason: "Error", Message: "earlier", FinishedAt: metav1.NewTime(t0.Add(-time.Minute))}
	for _, tc := range []struct {
		name   string
		v      suspendView
		status metav1.ConditionStatus
		reason string
		words  string
	}{
		{name: "neither asked nor saved", v: suspendView{pod: pod(onNode, canSuspend, guestUp)}},
		{name: "asked, saving", v: suspendView{asked: true, claim: "web-state", pod: pod(onNode, canSuspend, guestUp)},
			status: metav1.ConditionFalse, reason: vmv1.ReasonSuspending, words: "runner pod web-runner is saving the guest's state to claim web-state"},
		{name: "asked, the agent failed", v: suspendView{asked: true, claim: "web-state", pod: pod(onNode, canSuspend, guestUp, agentFailed)},
			status: metav1.ConditionFalse, reason: vmv1.ReasonSuspendFailed, words: "could not save the guest: --suspend-to: no space left on device; the guest runs on"},
		{name: "asked, pod without the state claim", v: suspendView{asked: true, claim: "web-state", pod: pod(onNode, withArgs("--name=web"), guestUp)},
			status: metav1.ConditionFalse, reason: vmv1.ReasonNotSuspendable, words: "restart the VM (vmctl restart) so its next runner pod mounts spec.guest.stateClaim"},
		{name: "asked, no guest and nothing saved", v: suspendView{asked: true, claim: "web-state"},
			status: metav1.ConditionFalse, reason: vmv1.ReasonNotSuspendable, words: "nothing to suspend"},
		{name: "saved", v: suspendView{asked: true, claim: "web-state", saved: state},
			status: metav1.ConditionTrue, reason: vmv1.ReasonSuspended, words: "saved on claim web-state (runner pod web-runner on node node-a, 2026-12-01T12:00:00Z); no runner pod holds CPU or memory; set spec.suspend false (vmctl resume)"},
		{name: "saved, its pod ended and going", v: suspendView{asked: true, claim: "web-state", saved: state, pod: pod(onNode, canSuspend, deleting)},
			status: metav1.ConditionTrue, reason: vmv1.ReasonSuspended, words: "no runner pod holds CPU or memory"},
		{name: "saved, an older failure", v: suspendView{asked: true, claim: "web-state", saved: state, last: oldFailure},
			status: metav1.ConditionTrue, reason: vmv1.ReasonSuspended, words: "vmctl resume"},
		{name: "resume asked, no pod yet (halted)", v: suspendView{claim: "web-state", saved: state},
			status: metav1.ConditionTrue, reason: vmv1.ReasonSuspended, words: "the guest resumes from it at its next start"},
		{name: "resuming", v: suspendView{claim: "web-state", saved: state, pod: pod(onNode, resuming, runnerUp)},
			status: metav1.ConditionFalse, reason: vmv1.ReasonResuming, words: "runner pod web-runner is loading the state saved on claim web-state"},
		{name: "resume failed", v: suspendView{claim: "web-state", saved: state, pod: pod(onNode, resuming, failed), last: badResume},
			status: metav1.ConditionFalse, reason: vmv1.ReasonResumeFailed, words: "could not resume from it: runner exited with code 9 (Error): --resume-from: QEMU could not load the state; the state is kept"},
		{name: "resumed: the state is consumed", v: suspendView{claim: "web-state", pod: pod(onNode, resuming, guestUp)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := vmv1.VirtualMachineStatus{Conditions: []metav1.Condition{{Type: vmv1.ConditionSuspended, Status: metav1.ConditionTrue, Reason: "Old", LastTransitionTime: metav1.Now()}}}
			setSuspended(&st, 3, tc.v)
			c := meta.FindStatusCondition(st.Conditions, vmv1.ConditionSuspended)
			if tc.reason == "" {
				if c != nil {
					t.Fatalf("Suspended %+v, want none", c)
				}
				return
			}
			if c == nil || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.words) || c.ObservedGeneration != 3 {
				t.Fatalf("Suspended %+v\nwant %s %s with %q", c, tc.status, tc.reason, tc.words)
			}
		})
	}
}

// TestObserveSuspended: a VM whose state is recorded is Suspended, with or without the pod that
// saved it; without spec.suspend (a resume on its way) it is not; Halted stays Stopped.
func TestObserveSuspended(t *testing.T) {
	state := &vmv1.SuspendedState{ClaimName: "web-state"}
	for _, tc := range []struct {
		name            string
		st              vmv1.VirtualMachineStatus
		pod             *corev1.Pod
		halted, suspend bool
		want            vmv1.Phase
	}{
		{"saved, no pod", vmv1.VirtualMachineStatus{SuspendedState: state}, nil, false, true, vmv1.PhaseSuspended},
		{"saved, its pod going", vmv1.VirtualMachineStatus{SuspendedState: state}, pod(onNode, deleting), false, true, vmv1.PhaseSuspended},
		{"saved, halted", vmv1.VirtualMachineStatus{SuspendedState: state}, nil, true, true, vmv1.PhaseStopped},
		{"saved, resume asked", vmv1.VirtualMachineStatus{SuspendedState: state, Phase: vmv1.PhaseSuspended}, nil, false, false, vmv1.PhasePending},
		{"saving", vmv1.VirtualMachineStatus{PodUID: "uid-1"}, pod(onNode, ready, runnerUp), false, true, vmv1.PhaseRunning},
		{"resuming pod on a node", vmv1.VirtualMachineStatus{SuspendedState: state, PodUID: "uid-1"}, pod(onNode, runnerUp), false, false, vmv1.PhaseStarting},
	} {
		st := tc.st
		observe(&st, 1, tc.pod, tc.halted, tc.suspend)
		if st.Phase != tc.want {
			t.Errorf("%s: phase %s, want %s", tc.name, st.Phase, tc.want)
		}
	}
}

// TestDiscardRequested: only a run request later than the saved state, not yet counted,
// discards it.
func TestDiscardRequested(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: t0.Add(d)} }
	for _, tc := range []struct {
		name      string
		req, last *metav1.Time
		saved     bool
		want      bool
	}{
		{"nothing saved", at(time.Hour), nil, false, false},
		{"no request", nil, nil, true, false},
		{"a request before the suspend", at(-time.Hour), at(-time.Hour), true, false},
		{"a request after it", at(time.Hour), at(-time.Hour), true, true},
		{"that request counted", at(time.Hour), at(time.Hour), true, false},
	} {
		vm := web(vmv1.RunAlways)
		vm.Spec.RunRequestedAt, vm.Status.LastRunRequest = tc.req, tc.last
		if tc.saved {
			vm.Status.SuspendedState = &vmv1.SuspendedState{ClaimName: "web-state", SavedAt: metav1.NewTime(t0)}
		}
		if got := discardRequested(vm); got != tc.want {
			t.Errorf("%s: discardRequested = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestStateClaimUnfit: a state claim must be a Filesystem claim of at least the guest's memory
// (maxMemory when set) plus the overhead.
func TestStateClaimUnfit(t *testing.T) {
	g := &vmv1.GuestSpec{Memory: resource.MustParse("256Mi"), StateClaim: &vmv1.StateClaim{ClaimName: "web-state"}}
	resizable := g.DeepCopy()
	resizable.MaxMemory = ptr.To(resource.MustParse("1Gi"))
	for _, tc := range []struct {
		name  string
		g     *vmv1.GuestSpec
		claim podspec.Claim
		words string // "" when it fits
	}{
		{"fits exactly", g, podspec.Claim{SizeMiB: 320}, ""},
		{"size not known yet", g, podspec.Claim{}, ""},
		{"too small", g, podspec.Claim{SizeMiB: 300}, `PersistentVolumeClaim "web-state" (spec.guest.stateClaim) holds 300Mi, and the guest's state may need 320Mi (its memory, 256Mi, plus 64Mi): name a claim of at least 320Mi`},
		{"too small for maxMemory", resizable, podspec.Claim{SizeMiB: 512}, "may need 1088Mi (its memory, 1Gi, plus 64Mi)"},
		{"a Block claim", g, podspec.Claim{Block: true, SizeMiB: 4096}, "is a Block claim: the guest's state is a file; name a Filesystem claim"},
	} {
		why := stateClaimUnfit(tc.g, tc.claim)
		switch {
		case tc.words == "" && why != nil:
			t.Errorf("%s: unfit: %s", tc.name, why.message)
		case tc.words != "" && (why == nil || why.reason != vmv1.ReasonStateClaimUnfit || !strings.Contains(why.message, tc.words)):
			t.Errorf("%s: %+v, want %q", tc.name, why, tc.words)
		}
	}
}
