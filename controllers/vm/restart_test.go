package vm

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
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
	at := func(ago time.Duration) *metav1.Time { return ptr.To(metav1.NewTime(now.Add(-ago))) }
	for _, tc := range []struct {
		name     string
		phase    vmv1.Phase
		restarts int32
		last     *vmv1.Termination
		request  *metav1.Time // status.lastRunRequest
		asked    *metav1.Time // spec.runRequestedAt
		want     time.Duration
	}{
		{"never restarted", vmv1.PhasePending, 0, ended(0), nil, nil, 0},
		{"no termination recorded", vmv1.PhasePending, 3, nil, nil, nil, 0},
		{"first restart is immediate", vmv1.PhasePending, 1, ended(0), nil, nil, 0},
		{"second restart waits 10 s from the end", vmv1.PhasePending, 2, ended(4 * time.Second), nil, nil, 6 * time.Second},
		{"back-off already over", vmv1.PhasePending, 2, ended(time.Minute), nil, nil, -50 * time.Second},
		{"capped at 5 minutes", vmv1.PhasePending, 20, ended(time.Minute), nil, nil, 4 * time.Minute},
		{"a request before the crash does not skip it", vmv1.PhasePending, 2, ended(4 * time.Second), at(5 * time.Second), nil, 6 * time.Second},
		// What the user asked for starts at once, whatever the crashes before.
		{"run request since the end", vmv1.PhasePending, 5, ended(4 * time.Second), at(2 * time.Second), nil, 0},
		{"run request in the same second as the end", vmv1.PhasePending, 5, ended(4 * time.Second), at(4 * time.Second), nil, 0},
		{"run request made during the back-off, not counted yet", vmv1.PhasePending, 5, ended(4 * time.Second), nil, at(time.Second), 0},
		{"an old request in the spec does not skip it", vmv1.PhasePending, 2, ended(4 * time.Second), nil, at(time.Hour), 6 * time.Second},
		{"start from Stopped", vmv1.PhaseStopped, 5, ended(time.Second), nil, nil, 0},
		{"old pod replaced on purpose, now gone", vmv1.PhaseStopping, 5, ended(time.Second), nil, nil, 0},
	} {
		vm := &vmv1.VirtualMachine{Status: vmv1.VirtualMachineStatus{Phase: tc.phase, RestartCount: tc.restarts, LastTermination: tc.last, LastRunRequest: tc.request},
			Spec: vmv1.VirtualMachineSpec{RunRequestedAt: tc.asked}}
		if got := restartWait(vm, now); got != tc.want {
			t.Errorf("%s: restartWait = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestRestartsPerStrategy(t *testing.T) {
	for _, tc := range []struct {
		strategy          vmv1.RunStrategy
		afterFailure, end bool // a new run after a failure, after a clean end
	}{
		{vmv1.RunAlways, true, true},
		{"", true, true}, // the CRD defaults Always; an unset strategy behaves the same
		{vmv1.RunRerunOnFailure, true, false},
		{vmv1.RunOnce, false, false},
		{vmv1.RunManual, false, false},
		{vmv1.RunHalted, false, false},
	} {
		if got := restarts(tc.strategy, true); got != tc.afterFailure {
			t.Errorf("%q after a failure: restarts = %v", tc.strategy, got)
		}
		if got := restarts(tc.strategy, false); got != tc.end {
			t.Errorf("%q after a clean end: restarts = %v", tc.strategy, got)
		}
	}
}

func TestStopped(t *testing.T) {
	for _, tc := range []struct {
		phase    vmv1.Phase
		strategy vmv1.RunStrategy
		want     bool
	}{
		{vmv1.PhaseRunning, vmv1.RunOnce, false},
		{vmv1.PhasePending, vmv1.RunOnce, false},
		{vmv1.PhaseSucceeded, vmv1.RunOnce, true},
		{vmv1.PhaseFailed, vmv1.RunOnce, true},
		{vmv1.PhaseSucceeded, vmv1.RunManual, true},
		{vmv1.PhaseFailed, vmv1.RunManual, true},
		{vmv1.PhaseSucceeded, vmv1.RunRerunOnFailure, true},
		{vmv1.PhaseFailed, vmv1.RunRerunOnFailure, false},
		{vmv1.PhaseSucceeded, vmv1.RunAlways, false},
		{vmv1.PhaseFailed, vmv1.RunAlways, false},
		// Stopped is not an ended run: leaving Halted starts one under any strategy.
		{vmv1.PhaseStopped, vmv1.RunOnce, false},
		{vmv1.PhaseStopped, vmv1.RunManual, false},
	} {
		vm := &vmv1.VirtualMachine{Spec: vmv1.VirtualMachineSpec{RunStrategy: tc.strategy}, Status: vmv1.VirtualMachineStatus{Phase: tc.phase}}
		if got := stopped(vm); got != tc.want {
			t.Errorf("%s under %s: stopped = %v, want %v", tc.phase, tc.strategy, got, tc.want)
		}
	}
}

// TestRunRequests: which run a request replaces, when it is counted, and which ended run it
// starts again, for each strategy.
func TestRunRequests(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) *metav1.Time { return ptr.To(metav1.NewTime(t0.Add(time.Duration(s) * time.Second))) }
	podFor := func(s int) *corev1.Pod { // a runner pod made for the request at s (0: none)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if s != 0 {
			p.Annotations[AnnotationRunRequest] = at(s).UTC().Format(time.RFC3339)
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		strategy vmv1.RunStrategy
		phase    vmv1.Phase
		request  *metav1.Time // spec.runRequestedAt
		last     *metav1.Time // status.lastRunRequest
		pod      *corev1.Pod
		replace  bool // replaceRequested(vm, pod)
		counted  bool // requestCounted(vm)
		rerun    bool // rerunRequested(vm): an ended run without its pod starts again
	}{
		{name: "no request", strategy: vmv1.RunAlways, phase: vmv1.PhaseRunning, pod: podFor(0), counted: true},
		{name: "restart a running guest", strategy: vmv1.RunAlways, phase: vmv1.PhaseRunning, request: at(10), pod: podFor(0), replace: true},
		{name: "restart under Manual", strategy: vmv1.RunManual, phase: vmv1.PhaseRunning, request: at(10), last: at(5), pod: podFor(5), replace: true},
		{name: "the pod was made for it", strategy: vmv1.RunAlways, phase: vmv1.PhaseRunning, request: at(10), last: at(10), pod: podFor(10), counted: true},
		{name: "a VM created with an old request", strategy: vmv1.RunAlways, phase: vmv1.PhaseStarting, request: at(10), last: at(10), pod: podFor(10), counted: true},
		{name: "counted, the old pod's delete lost", strategy: vmv1.RunAlways, phase: vmv1.PhaseStopping, request: at(10), last: at(10), pod: podFor(5), replace: true, counted: true},
		{name: "an older time than the last is no request", strategy: vmv1.RunAlways, phase: vmv1.PhaseRunning, request: at(3), last: at(5), pod: podFor(5), counted: true},
		{name: "Halted wins", strategy: vmv1.RunHalted, phase: vmv1.PhaseRunning, request: at(10), pod: podFor(0)},
		{name: "Halted wins over an ended run", strategy: vmv1.RunHalted, phase: vmv1.PhaseSucceeded, request: at(10)},
		{name: "ended under Once, pod kept", strategy: vmv1.RunOnce, phase: vmv1.PhaseSucceeded, request: at(10), pod: podFor(0), replace: true, rerun: true},
		{name: "ended under Once, pod gone", strategy: vmv1.RunOnce, phase: vmv1.PhaseFailed, request: at(10), rerun: true},
		{name: "ended under Manual", strategy: vmv1.RunManual, phase: vmv1.PhaseSucceeded, request: at(10), last: at(5), rerun: true},
		{name: "powered off under RerunOnFailure", strategy: vmv1.RunRerunOnFailure, phase: vmv1.PhaseSucceeded, request: at(10), rerun: true},
		{name: "failed under RerunOnFailure: restarted anyway", strategy: vmv1.RunRerunOnFailure, phase: vmv1.PhaseFailed, request: at(10)},
		{name: "ended, request counted already", strategy: vmv1.RunOnce, phase: vmv1.PhaseSucceeded, request: at(10), last: at(10), counted: true},
		{name: "waiting to restart: met by the next pod", strategy: vmv1.RunAlways, phase: vmv1.PhasePending, request: at(10)},
	} {
		vm := &vmv1.VirtualMachine{Spec: vmv1.VirtualMachineSpec{RunStrategy: tc.strategy, RunRequestedAt: tc.request},
			Status: vmv1.VirtualMachineStatus{Phase: tc.phase, LastRunRequest: tc.last}}
		if tc.pod != nil {
			if got := replaceRequested(vm, tc.pod); got != tc.replace {
				t.Errorf("%s: replaceRequested = %v, want %v", tc.name, got, tc.replace)
			}
		}
		if got := requestCounted(vm); got != tc.counted {
			t.Errorf("%s: requestCounted = %v, want %v", tc.name, got, tc.counted)
		}
		if got := rerunRequested(vm); got != tc.rerun {
			t.Errorf("%s: rerunRequested = %v, want %v", tc.name, got, tc.rerun)
		}
	}
}

// TestSatisfiedRequest: a new pod meets the latest request, counted or not, so none outlives
// the run that followed it.
func TestSatisfiedRequest(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) *metav1.Time { return ptr.To(metav1.NewTime(t0.Add(time.Duration(s) * time.Second))) }
	for _, tc := range []struct {
		request, last, want *metav1.Time
	}{
		{nil, nil, nil},
		{at(5), nil, at(5)},
		{nil, at(5), at(5)},
		{at(10), at(5), at(10)},
		{at(3), at(5), at(5)},
	} {
		vm := &vmv1.VirtualMachine{Spec: vmv1.VirtualMachineSpec{RunRequestedAt: tc.request}, Status: vmv1.VirtualMachineStatus{LastRunRequest: tc.last}}
		got := satisfiedRequest(vm)
		if (got == nil) != (tc.want == nil) || got != nil && !got.Equal(tc.want) {
			t.Errorf("request %v, last %v: satisfiedRequest = %v, want %v", tc.request, tc.last, got, tc.want)
		}
	}
}

// TestCounted: an ended pod other than the one in status is already counted unless it was made
// for the VM's current run: by crash restarts and by counted run requests.
func TestCounted(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	pod := func(annotation, request string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if annotation != "" {
			p.Annotations[AnnotationRestartCount] = annotation
		}
		if request != "" {
			p.Annotations[AnnotationRunRequest] = request
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		restarts int32
		last     *metav1.Time
		want     bool
	}{
		{"this run's pod, its status write lost: still to count", pod("0", ""), 0, nil, false},
		{"this run's pod after 3 restarts", pod("3", ""), 3, nil, false},
		{"an earlier run's pod whose delete was lost", pod("2", ""), 3, nil, true},
		{"made before the annotation: never taken for this run's", pod("", ""), 0, nil, true},
		{"made for the last counted request", pod("1", t0.Format(time.RFC3339)), 1, ptr.To(metav1.NewTime(t0)), false},
		{"replaced by a counted request, its delete lost", pod("1", t0.Format(time.RFC3339)), 1, ptr.To(metav1.NewTime(t0.Add(time.Second))), true},
		{"made before any request, one counted since", pod("0", ""), 0, ptr.To(metav1.NewTime(t0)), true},
	} {
		vm := &vmv1.VirtualMachine{Status: vmv1.VirtualMachineStatus{RestartCount: tc.restarts, LastRunRequest: tc.last}}
		if got := counted(tc.pod, vm); got != tc.want {
			t.Errorf("%s: counted = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRunStateOf: a pod being deleted comes first, then a migration that may hold the guest,
// then what the pod says; without a pod, the one status names, Halted, a hold, or a start.
func TestRunStateOf(t *testing.T) {
	succeeded := func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }
	named := func(vm *vmv1.VirtualMachine) { vm.Status.PodUID = "uid-1" }
	for _, tc := range []struct {
		name         string
		vm           *vmv1.VirtualMachine
		pod          *corev1.Pod
		moving, held bool
		want         runState
	}{
		{"pod deleting", web(vmv1.RunAlways), pod(deleting), false, false, runDeleting},
		{"pod deleting while moving", web(vmv1.RunAlways), pod(deleting, failed), true, false, runDeleting},
		{"source ended while moving", web(vmv1.RunAlways), pod(failed), true, false, runMoving},
		{"source vanished while moving", with(web(vmv1.RunAlways), named), nil, true, false, runMoving},
		{"moving, nothing of ours", web(vmv1.RunAlways), nil, true, false, runNoPod},
		{"pod ended", web(vmv1.RunAlways), pod(succeeded), false, false, runEnded},
		{"pod ended, halted", web(vmv1.RunHalted), pod(failed), false, true, runEnded},
		{"pod runs", web(vmv1.RunAlways), pod(onNode, ready), false, false, runLive},
		{"pod runs, halted and held", web(vmv1.RunHalted), pod(onNode), false, true, runLive},
		{"pod of this run, not yet in status", with(web(vmv1.RunAlways), restarted(2)), pod(onNode, run(2)), false, false, runLive},
		{"pod of this run, in status", with(with(web(vmv1.RunAlways), restarted(2)), named), pod(onNode, run(2)), false, false, runLive},
		{"pod of a counted run seen live", with(web(vmv1.RunAlways), restarted(2)), pod(onNode, ready, run(1)), false, false, runBehind},
		{"pod from before the annotation", with(web(vmv1.RunAlways), restarted(2)), pod(onNode, ready), false, false, runLive},
		{"pod in status not in the cache", with(web(vmv1.RunHalted), named), nil, false, true, runMissing},
		{"halted", web(vmv1.RunHalted), nil, false, true, runHalted},
		{"halted and suspended", with(web(vmv1.RunHalted), suspend), nil, false, false, runHalted},
		{"suspended", with(web(vmv1.RunAlways), suspend), nil, false, false, runSuspended},
		{"suspended and held", with(web(vmv1.RunAlways), suspend), nil, false, true, runSuspended},
		{"suspended, pod still runs", with(web(vmv1.RunAlways), suspend), pod(onNode, ready), false, false, runLive},
		{"held", web(vmv1.RunAlways), nil, false, true, runHeld},
		{"no pod", web(vmv1.RunOnce), nil, false, false, runNoPod},
	} {
		if got := runStateOf(tc.vm, tc.pod, tc.moving, tc.held); got != tc.want {
			t.Errorf("%s: runStateOf = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// restarted sets status.restartCount.
func restarted(n int32) func(*vmv1.VirtualMachine) {
	return func(vm *vmv1.VirtualMachine) { vm.Status.RestartCount = n }
}

// run marks a runner pod as made for the run after restart n.
func run(n int) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		metav1.SetMetaDataAnnotation(&p.ObjectMeta, AnnotationRestartCount, strconv.Itoa(n))
	}
}

// suspend sets spec.suspend, with the state claim it needs.
func suspend(vm *vmv1.VirtualMachine) {
	vm.Spec.Suspend = true
	vm.Spec.Guest.StateClaim = &vmv1.StateClaim{ClaimName: "web-state"}
}

// saved is a runner pod that saved its guest and ended.
func saved(p *corev1.Pod) {
	p.Status.Phase = corev1.PodSucceeded
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: vmv1.RunnerContainer, State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Message: vmv1.MessageSuspended + vmv1.StateFile}}}}
}

// with edits a VM in a table.
func with(vm *vmv1.VirtualMachine, edit func(*vmv1.VirtualMachine)) *vmv1.VirtualMachine {
	edit(vm)
	return vm
}

// TestEndedAction: a saved guest's end is recorded whatever the spec says now (the state is
// never thrown away); then Halted wins, then the strategy's restart, then a run request; else
// the end is kept.
func TestEndedAction(t *testing.T) {
	succeeded := func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }
	asked := func(vm *vmv1.VirtualMachine) { vm.Spec.RunRequestedAt = ptr.To(metav1.Now()) }
	for _, tc := range []struct {
		name string
		vm   *vmv1.VirtualMachine
		pod  *corev1.Pod
		want action
	}{
		{"saved its guest", with(web(vmv1.RunAlways), suspend), pod(saved), actSuspended},
		{"saved its guest, suspend since withdrawn", with(with(web(vmv1.RunAlways), suspend), func(v *vmv1.VirtualMachine) { v.Spec.Suspend = false }), pod(saved), actSuspended},
		{"saved its guest, halted since", with(with(web(vmv1.RunHalted), suspend), asked), pod(saved), actSuspended},
		{"saved, but the state claim is gone from the spec", web(vmv1.RunAlways), pod(saved), actRestart},
		{"powered off while asked to suspend", with(web(vmv1.RunOnce), suspend), pod(succeeded), actKeep},
		{"halted", with(web(vmv1.RunHalted), asked), pod(failed), actStop},
		{"always", web(vmv1.RunAlways), pod(succeeded), actRestart},
		{"rerun on failure, failed", web(vmv1.RunRerunOnFailure), pod(failed), actRestart},
		{"rerun on failure, powered off", web(vmv1.RunRerunOnFailure), pod(succeeded), actKeep},
		{"once, asked to run again", with(web(vmv1.RunOnce), asked), pod(succeeded), actRerun},
		{"once", web(vmv1.RunOnce), pod(failed), actKeep},
		{"manual", web(vmv1.RunManual), pod(succeeded), actKeep},
	} {
		if got := endedAction(tc.vm, tc.pod); got != tc.want {
			t.Errorf("%s: endedAction = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestLiveAction: Halted stops even a migrating guest; a migration otherwise keeps the pod as
// it is; then a suspend, then a run request, then images under imageUpdatePolicy Recreate.
func TestLiveAction(t *testing.T) {
	base := web(vmv1.RunAlways)
	base.Spec.Guest = vmv1.GuestSpec{CPUs: 1, Memory: resource.MustParse("256Mi"), KernelImage: "k:1", RootDisk: vmv1.RootDisk{Image: "d:1"}}
	running := podspec.Build(base, podspec.DefaultOptions())
	same := podspec.PodImages(running)
	newer := same
	newer.Runner = "virtpod/runner:v2"
	moving := running.DeepCopy()
	metav1.SetMetaDataAnnotation(&moving.ObjectMeta, vmv1.AnnotationMigration, "uid-m")
	vm := func(s vmv1.RunStrategy, policy vmv1.ImageUpdatePolicy, asked bool) *vmv1.VirtualMachine {
		v := base.DeepCopy()
		v.Spec.RunStrategy, v.Spec.ImageUpdatePolicy = s, policy
		if asked {
			v.Spec.RunRequestedAt = ptr.To(metav1.Now())
		}
		return v
	}
	for _, tc := range []struct {
		name   string
		vm     *vmv1.VirtualMachine
		pod    *corev1.Pod
		images vmv1.Images
		want   action
	}{
		{"as it should be", vm(vmv1.RunAlways, vmv1.ImageUpdateRecreate, false), running, same, actKeep},
		{"halted", vm(vmv1.RunHalted, "", true), running, newer, actStop},
		{"halted while migrating", vm(vmv1.RunHalted, "", false), moving, same, actStop},
		{"migrating, asked to restart", vm(vmv1.RunAlways, vmv1.ImageUpdateRecreate, true), moving, newer, actKeep},
		{"suspend", with(vm(vmv1.RunAlways, vmv1.ImageUpdateRecreate, true), suspend), running, newer, actSuspend},
		{"suspend while migrating", with(vm(vmv1.RunAlways, "", false), suspend), moving, same, actKeep},
		{"suspend, halted", with(vm(vmv1.RunHalted, "", false), suspend), running, same, actStop},
		{"asked to restart", vm(vmv1.RunAlways, vmv1.ImageUpdateRecreate, true), running, newer, actRerun},
		{"new images, Recreate", vm(vmv1.RunAlways, vmv1.ImageUpdateRecreate, false), running, newer, actRecreate},
		{"new images, not Recreate", vm(vmv1.RunAlways, "", false), running, newer, actKeep},
	} {
		if got := liveAction(tc.vm, tc.pod, tc.images); got != tc.want {
			t.Errorf("%s: liveAction = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestVanishedAction: a run that had ended, or a halted VM's, is let go of; else the strategy
// restarts the vanished run as a failure, or keeps it Failed.
func TestVanishedAction(t *testing.T) {
	for _, tc := range []struct {
		strategy vmv1.RunStrategy
		phase    vmv1.Phase
		want     action
	}{
		{vmv1.RunHalted, vmv1.PhaseStopping, actLetGo},
		{vmv1.RunOnce, vmv1.PhaseSucceeded, actLetGo},
		{vmv1.RunRerunOnFailure, vmv1.PhaseSucceeded, actLetGo},
		{vmv1.RunAlways, vmv1.PhaseRunning, actRestart},
		{vmv1.RunAlways, vmv1.PhaseSucceeded, actRestart},
		{vmv1.RunRerunOnFailure, vmv1.PhaseRunning, actRestart},
		{vmv1.RunOnce, vmv1.PhaseRunning, actFail},
		{vmv1.RunManual, vmv1.PhaseStarting, actFail},
	} {
		vm := web(tc.strategy)
		vm.Status.Phase = tc.phase
		if got := vanishedAction(vm); got != tc.want {
			t.Errorf("%s in phase %s: vanishedAction = %d, want %d", tc.strategy, tc.phase, got, tc.want)
		}
	}
}
