package vm

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/migratable"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// want is a condition's status, reason and message.
type want struct {
	status          metav1.ConditionStatus
	reason, message string
}

func check(t *testing.T, name string, conds []metav1.Condition, typ string, w want) {
	t.Helper()
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		t.Errorf("%s: no %s condition", name, typ)
		return
	}
	if c.Status != w.status || c.Reason != w.reason || c.Message != w.message || c.ObservedGeneration != 7 {
		t.Errorf("%s: %s = %s/%s %q (generation %d)\nwant %s/%s %q", name, typ, c.Status, c.Reason, c.Message, c.ObservedGeneration, w.status, w.reason, w.message)
	}
}

// pod is a runner pod in the given state.
func pod(state ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-runner", UID: "uid-1"}}
	for _, s := range state {
		s(p)
	}
	return p
}

func onNode(p *corev1.Pod) { p.Spec.NodeName = "node-a" }

// booting is Ready's message while the runner waits for its node agent or the guest boots.
const booting = "the runner is up and the guest is booting; the guest starts once the node agent (virtpod-agent on node node-a) has plumbed " +
	"the pod network, so a VM that stays here waits for that agent: " +
	"kubectl -n virtpod-system get pods -l app.kubernetes.io/name=virtpod-agent --field-selector spec.nodeName=node-a"

func deleting(p *corev1.Pod) {
	p.DeletionTimestamp = ptr.To(metav1.Now())
}
func failed(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }
func ready(p *corev1.Pod) {
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
}
func runnerUp(p *corev1.Pod) {
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: vmv1.RunnerContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
}

// probed is a pod whose runner has a startup probe (the guest runs once it passes) and a guest
// readiness probe; guestUp marks the startup probe passed.
func probed(p *corev1.Pod) {
	p.Spec.Containers = []corev1.Container{{Name: vmv1.RunnerContainer, Args: []string{"--name=web", "--readiness-probe=http:8080/healthz"},
		StartupProbe: &corev1.Probe{}}}
}
func startupOnly(p *corev1.Pod) {
	p.Spec.Containers = []corev1.Container{{Name: vmv1.RunnerContainer, Args: []string{"--name=web"}, StartupProbe: &corev1.Probe{}}}
}
func guestUp(p *corev1.Pod) {
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: vmv1.RunnerContainer, Started: ptr.To(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
}

// agentSawStart is the node agent's guest-started annotation (agent/start).
func agentSawStart(p *corev1.Pod) {
	p.Annotations = map[string]string{vmv1.AnnotationGuestStarted: "2026-12-05T05:30:00.123Z"}
}
func pullBackOff(p *corev1.Pod) {
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: vmv1.RunnerContainer, State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "r:1"`}}}}
}
func refusedByScheduler(p *corev1.Pod) {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: "Unschedulable", Message: "0/3 nodes are available: 3 Insufficient devices.virtpod.io/kvm."})
}

// TestScheduledAndReady decides both conditions as Reconcile does (observe, then the setters)
// for each state a VM can be in, and checks what a user sees.
func TestScheduledAndReady(t *testing.T) {
	boom := &vmv1.Termination{ExitCode: 1, Reason: "Error", Message: "qemu: no kernel"}
	lost := &cause{vmv1.ReasonNodeNotReady, "node node-a is not ready (...)"}
	for _, tc := range []struct {
		name      string
		status    vmv1.VirtualMachineStatus // before
		f         facts
		phase     vmv1.Phase
		scheduled want
		ready     want
	}{
		{name: "held by the provider", f: facts{held: &cause{vmv1.ReasonProviderDisabled, "ProviderClass qemu is disabled"}}, phase: vmv1.PhasePending,
			scheduled: want{"False", vmv1.ReasonProviderDisabled, "ProviderClass qemu is disabled"},
			ready:     want{"False", vmv1.ReasonProviderDisabled, "ProviderClass qemu is disabled"}},
		{name: "held even after a stop", status: vmv1.VirtualMachineStatus{Phase: vmv1.PhaseFailed, LastTermination: boom},
			f: facts{held: &cause{vmv1.ReasonPodNameTaken, "taken"}}, phase: vmv1.PhaseFailed,
			scheduled: want{"False", vmv1.ReasonPodNameTaken, "taken"}, ready: want{"False", vmv1.ReasonPodNameTaken, "taken"}},
		{name: "pod being created", phase: vmv1.PhasePending,
			scheduled: want{"False", vmv1.ReasonNoRunnerPod, "the runner pod is being created"},
			ready:     want{"False", vmv1.ReasonNoRunnerPod, "the runner pod is being created"}},
		{name: "restart back-off", status: vmv1.VirtualMachineStatus{Phase: vmv1.PhaseRunning, RestartCount: 3, LastTermination: boom}, phase: vmv1.PhasePending,
			scheduled: want{"False", vmv1.ReasonRestartBackoff, "restart 3 after Error (back-off 20s): qemu: no kernel"},
			ready:     want{"False", vmv1.ReasonRestartBackoff, "restart 3 after Error (back-off 20s): qemu: no kernel"}},
		{name: "failed for good, pod gone", status: vmv1.VirtualMachineStatus{Phase: vmv1.PhaseFailed, LastTermination: boom}, phase: vmv1.PhaseFailed,
			scheduled: want{"False", vmv1.ReasonNoRunnerPod, "the guest has stopped and its runner pod is gone"},
			ready:     want{"False", vmv1.ReasonRunnerFailed, "runner exited with code 1 (Error): qemu: no kernel"}},
		{name: "powered off, nothing recorded", status: vmv1.VirtualMachineStatus{Phase: vmv1.PhaseSucceeded}, phase: vmv1.PhaseSucceeded,
			scheduled: want{"False", vmv1.ReasonNoRunnerPod, "the guest has stopped and its runner pod is gone"},
			ready:     want{"False", vmv1.ReasonGuestStopped, "the guest has stopped"}},
		{name: "waiting for the scheduler", f: facts{pod: pod()}, phase: vmv1.PhaseScheduling,
			scheduled: want{"False", vmv1.ReasonWaitingForScheduler, "the runner pod waits for the scheduler"},
			ready:     want{"False", vmv1.ReasonWaitingForScheduler, "the runner pod waits for the scheduler"}},
		{name: "unschedulable: virtpod's account on Scheduled only", f: facts{pod: pod(refusedByScheduler), fit: "0/3 nodes fit: 3 without usable KVM"}, phase: vmv1.PhaseScheduling,
			scheduled: want{"False", vmv1.ReasonUnschedulable, "runner pod cannot be scheduled: 0/3 nodes are available: 3 Insufficient devices.virtpod.io/kvm.; virtpod: 0/3 nodes fit: 3 without usable KVM"},
			ready:     want{"False", vmv1.ReasonUnschedulable, "runner pod cannot be scheduled: 0/3 nodes are available: 3 Insufficient devices.virtpod.io/kvm."}},
		{name: "starting", f: facts{pod: pod(onNode)}, phase: vmv1.PhaseStarting,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"False", vmv1.ReasonStarting, "runner pod is starting on node node-a"}},
		{name: "image pull problem", f: facts{pod: pod(onNode, pullBackOff)}, phase: vmv1.PhaseStarting,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"False", vmv1.ReasonStarting, `runner container is waiting: ImagePullBackOff: Back-off pulling image "r:1"`}},
		{name: "guest booting", f: facts{pod: pod(onNode, runnerUp)}, phase: vmv1.PhaseStarting,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"False", vmv1.ReasonGuestBooting, booting}},
		{name: "running", f: facts{pod: pod(onNode, runnerUp, ready)}, phase: vmv1.PhaseRunning,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"True", vmv1.ReasonGuestRunning, "the guest is running"}},
		{name: "probed guest booting", f: facts{pod: pod(onNode, probed, runnerUp)}, phase: vmv1.PhaseStarting,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"False", vmv1.ReasonGuestBooting, booting}},
		{name: "probed guest running, probe not passed", f: facts{pod: pod(onNode, probed, guestUp)}, phase: vmv1.PhaseRunning,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready: want{"False", vmv1.ReasonGuestNotReady, "the guest is running but has not passed its readiness probe (HTTP GET of /healthz on port 8080); " +
				"the runner pod's Unhealthy events give each failure: kubectl describe pod web-runner"}},
		{name: "probed guest ready", f: facts{pod: pod(onNode, probed, guestUp, ready)}, phase: vmv1.PhaseRunning,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"True", vmv1.ReasonGuestRunning, "the guest is running and passes its readiness probe (HTTP GET of /healthz on port 8080)"}},
		{name: "started without a guest probe: Ready before the pod's readiness probe runs", f: facts{pod: pod(onNode, startupOnly, guestUp)}, phase: vmv1.PhaseRunning,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"True", vmv1.ReasonGuestRunning, "the guest is running"}},
		{name: "the node agent saw the guest start, before the kubelet's probe did", f: facts{pod: pod(onNode, startupOnly, runnerUp, agentSawStart)}, phase: vmv1.PhaseRunning,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"True", vmv1.ReasonGuestRunning, "the guest is running"}},
		{name: "the node agent saw the guest start, before the kubelet's status sync", f: facts{pod: pod(onNode, probed, agentSawStart)}, phase: vmv1.PhaseRunning,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready: want{"False", vmv1.ReasonGuestNotReady, "the guest is running but has not passed its readiness probe (HTTP GET of /healthz on port 8080); " +
				"the runner pod's Unhealthy events give each failure: kubectl describe pod web-runner"}},
		{name: "a started guest stopping", f: facts{pod: pod(onNode, startupOnly, guestUp, agentSawStart, deleting)}, phase: vmv1.PhaseStopping,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"False", vmv1.ReasonStopping, "the guest is shutting down"}},
		{name: "started without a startup probe says nothing of the guest", f: facts{pod: pod(onNode, guestUp)}, phase: vmv1.PhaseStarting,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"False", vmv1.ReasonGuestBooting, booting}},
		{name: "node lost while running", f: facts{pod: pod(onNode, runnerUp, ready), lost: lost}, phase: vmv1.PhaseRunning,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"False", vmv1.ReasonNodeNotReady, lost.message}},
		{name: "node lost while stopping", f: facts{pod: pod(onNode, ready, deleting), lost: lost}, phase: vmv1.PhaseStopping,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"False", vmv1.ReasonNodeNotReady, lost.message}},
		{name: "stopping", f: facts{pod: pod(onNode, ready, deleting)}, phase: vmv1.PhaseStopping,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"False", vmv1.ReasonStopping, "the guest is shutting down"}},
		{name: "halted, no pod", status: vmv1.VirtualMachineStatus{Phase: vmv1.PhaseStopping, RestartCount: 3, LastTermination: boom},
			f: facts{halted: haltedCause(web(vmv1.RunHalted))}, phase: vmv1.PhaseStopped,
			scheduled: want{"False", vmv1.ReasonHalted, "runStrategy is Halted: vmctl start web starts it"},
			ready:     want{"False", vmv1.ReasonHalted, "runStrategy is Halted: vmctl start web starts it"}},
		{name: "halted wins over a held start", status: vmv1.VirtualMachineStatus{Phase: vmv1.PhasePending},
			f: facts{halted: haltedCause(web(vmv1.RunHalted)), held: &cause{vmv1.ReasonProviderDisabled, "disabled"}}, phase: vmv1.PhaseStopped,
			scheduled: want{"False", vmv1.ReasonHalted, "runStrategy is Halted: vmctl start web starts it"},
			ready:     want{"False", vmv1.ReasonHalted, "runStrategy is Halted: vmctl start web starts it"}},
		{name: "halted, guest powering down", f: facts{pod: pod(onNode, runnerUp, ready), halted: haltedCause(web(vmv1.RunHalted)),
			stopping: stoppingCause(web(vmv1.RunHalted), pod(onNode, runnerUp, ready))}, phase: vmv1.PhaseStopping,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"False", vmv1.ReasonStopping, "runStrategy is Halted: powering the guest down"}},
		{name: "halted, node lost while powering down", f: facts{pod: pod(onNode, deleting), halted: haltedCause(web(vmv1.RunHalted)),
			stopping: stoppingCause(web(vmv1.RunHalted), pod(onNode, deleting)), lost: lost}, phase: vmv1.PhaseStopping,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"False", vmv1.ReasonNodeNotReady, lost.message}},
		{name: "ended and kept, its pod removed by someone", status: vmv1.VirtualMachineStatus{PodUID: "uid-1", LastTermination: boom},
			f: facts{pod: pod(onNode, failed, deleting)}, phase: vmv1.PhaseFailed,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"False", vmv1.ReasonRunnerFailed, "runner exited with code 1 (Error): qemu: no kernel"}},
		{name: "ended and kept (runStrategy Once)", status: vmv1.VirtualMachineStatus{PodUID: "uid-1", LastTermination: boom},
			f: facts{pod: pod(onNode, failed)}, phase: vmv1.PhaseFailed,
			scheduled: want{"True", vmv1.ReasonScheduled, "runner pod web-runner is on node node-a"},
			ready:     want{"False", vmv1.ReasonRunnerFailed, "runner exited with code 1 (Error): qemu: no kernel"}},
	} {
		st := tc.status
		observe(&st, 7, tc.f.pod, tc.f.halted != nil, false)
		setScheduled(&st, 7, tc.f)
		setReady(&st, 7, tc.f)
		if st.Phase != tc.phase {
			t.Errorf("%s: phase %s, want %s", tc.name, st.Phase, tc.phase)
		}
		check(t, tc.name, st.Conditions, vmv1.ConditionScheduled, tc.scheduled)
		check(t, tc.name, st.Conditions, vmv1.ConditionReady, tc.ready)
	}
}

// web is a VM named web with the run strategy.
func web(s vmv1.RunStrategy) *vmv1.VirtualMachine {
	return &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: vmv1.VirtualMachineSpec{RunStrategy: s}}
}

// TestStoppingCause: why Ready says a runner pod virtpod deleted goes away.
func TestStoppingCause(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	withStatus := func(vm *vmv1.VirtualMachine, edit func(*vmv1.VirtualMachineStatus)) *vmv1.VirtualMachine {
		edit(&vm.Status)
		return vm
	}
	halting := func(st *vmv1.VirtualMachineStatus) {
		st.Phase = vmv1.PhaseStopping
		st.Conditions = []metav1.Condition{{Type: vmv1.ConditionReady, Status: metav1.ConditionFalse, Reason: vmv1.ReasonStopping, Message: haltingMessage}}
	}
	for _, tc := range []struct {
		name string
		vm   *vmv1.VirtualMachine
		pod  *corev1.Pod
		want *cause
	}{
		{"no pod", web(vmv1.RunHalted), nil, nil},
		{"halted, pod still running", web(vmv1.RunHalted), pod(onNode, ready), &cause{vmv1.ReasonStopping, "runStrategy is Halted: powering the guest down"}},
		{"pod of the current run deleted by someone", withStatus(web(vmv1.RunAlways), func(st *vmv1.VirtualMachineStatus) { st.PodUID = "uid-1" }), pod(onNode, deleting), nil},
		{"started again while powering down", withStatus(web(vmv1.RunAlways), halting), pod(onNode, deleting),
			&cause{vmv1.ReasonStopping, "runStrategy is Always again: the guest starts again once its old runner pod is gone"}},
		{"still starting again", withStatus(web(vmv1.RunManual), func(st *vmv1.VirtualMachineStatus) {
			halting(st)
			st.Conditions[0].Message = "runStrategy is Manual again: the guest starts again once its old runner pod is gone"
		}), pod(onNode, deleting), &cause{vmv1.ReasonStopping, "runStrategy is Manual again: the guest starts again once its old runner pod is gone"}},
		{"restart requested", withStatus(web(vmv1.RunAlways), func(st *vmv1.VirtualMachineStatus) { st.LastRunRequest = ptr.To(metav1.NewTime(t0)) }),
			pod(onNode, deleting), &cause{vmv1.ReasonStopping, "restarting as asked at 2025-01-01T12:00:00Z (runRequestedAt): the guest is shutting down, then it boots in a new runner pod"}},
		{"replaced for new images", web(""), pod(onNode, deleting),
			&cause{vmv1.ReasonStopping, "the guest is shutting down; runStrategy is Always, so a new runner pod starts once this one is gone"}},
	} {
		got := stoppingCause(tc.vm, tc.pod)
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("%s: stoppingCause = %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
	if !wasHalted(&withStatus(web(vmv1.RunAlways), halting).Status) || wasHalted(&web(vmv1.RunHalted).Status) {
		t.Error("wasHalted reads the status, not the spec")
	}
}

// TestSettersIgnoreOrder: each setter decides from the facts alone, so running them in another
// order, or again, gives the same conditions.
func TestSettersIgnoreOrder(t *testing.T) {
	f := facts{pod: pod(onNode, runnerUp, ready), lost: &cause{vmv1.ReasonNodeDeleted, "node node-a was deleted"}}
	a, b := vmv1.VirtualMachineStatus{}, vmv1.VirtualMachineStatus{}
	observe(&a, 7, f.pod, false, false)
	setScheduled(&a, 7, f)
	setReady(&a, 7, f)
	observe(&b, 7, f.pod, false, false)
	setReady(&b, 7, f)
	setScheduled(&b, 7, f)
	setReady(&b, 7, f)
	for _, typ := range []string{vmv1.ConditionScheduled, vmv1.ConditionReady} {
		ca, cb := meta.FindStatusCondition(a.Conditions, typ), meta.FindStatusCondition(b.Conditions, typ)
		if ca.Status != cb.Status || ca.Reason != cb.Reason || ca.Message != cb.Message {
			t.Errorf("%s differs with the order: %+v vs %+v", typ, ca, cb)
		}
	}
}

func TestNodeLost(t *testing.T) {
	node := func(conds ...corev1.NodeCondition) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{Conditions: conds}}
	}
	always := &vmv1.VirtualMachine{Spec: vmv1.VirtualMachineSpec{RunStrategy: vmv1.RunAlways}}
	never := &vmv1.VirtualMachine{Spec: vmv1.VirtualMachineSpec{RunStrategy: vmv1.RunOnce}}
	halted := &vmv1.VirtualMachine{Spec: vmv1.VirtualMachineSpec{RunStrategy: vmv1.RunHalted}}
	for _, tc := range []struct {
		name string
		vm   *vmv1.VirtualMachine
		node *corev1.Node
		want *cause
	}{
		{"ready", always, node(corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}), nil},
		{"deleted", always, nil, &cause{vmv1.ReasonNodeDeleted,
			"node node-a was deleted; Kubernetes removes runner pod web-runner within about a minute (PodGC), then the guest starts on another node (runStrategy Always)"}},
		{"deleted, never restarted", never, nil, &cause{vmv1.ReasonNodeDeleted,
			"node node-a was deleted; Kubernetes removes runner pod web-runner within about a minute (PodGC), then the VM is marked Failed (runStrategy Once)"}},
		{"deleted while halting", halted, nil, &cause{vmv1.ReasonNodeDeleted,
			"node node-a was deleted; Kubernetes removes runner pod web-runner within about a minute (PodGC), then the VM is Stopped (runStrategy Halted)"}},
		{"stopped reporting", always, node(corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Message: "Kubelet stopped posting node status."}),
			&cause{vmv1.ReasonNodeNotReady, "node node-a is not ready (Ready=Unknown: Kubelet stopped posting node status.); the guest may still run there, " +
				"so no second copy starts while runner pod web-runner exists. If the node is down for good, delete it (kubectl delete node node-a) or taint it " +
				"(kubectl taint node node-a node.kubernetes.io/out-of-service=nodeshutdown:NoExecute): Kubernetes then removes the pod, and the guest starts on another node (runStrategy Always)"}},
		{"no Ready condition", never, node(), &cause{vmv1.ReasonNodeNotReady, "node node-a is not ready (no Ready condition); the guest may still run there, " +
			"so no second copy starts while runner pod web-runner exists. If the node is down for good, delete it (kubectl delete node node-a) or taint it " +
			"(kubectl taint node node-a node.kubernetes.io/out-of-service=nodeshutdown:NoExecute): Kubernetes then removes the pod, and the VM is marked Failed (runStrategy Once)"}},
	} {
		got := nodeLost(tc.vm, pod(onNode), tc.node)
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("%s: nodeLost = %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func TestImagesCurrent(t *testing.T) {
	vm := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}, Spec: vmv1.VirtualMachineSpec{
		Guest: vmv1.GuestSpec{CPUs: 1, Memory: resource.MustParse("256Mi"), KernelImage: "k:1", RootDisk: vmv1.RootDisk{Image: "d:1"}}}}
	running := podspec.Build(vm, podspec.DefaultOptions())
	ended := running.DeepCopy()
	ended.Status.Phase = corev1.PodSucceeded
	same := podspec.PodImages(running)
	newer := same
	newer.Runner = "virtpod/runner:v2"
	recreatingBefore := []metav1.Condition{{Type: vmv1.ConditionImagesCurrent, Status: metav1.ConditionFalse, Reason: vmv1.ReasonRecreating,
		Message: "replacing the runner pod: runner virtpod/runner:latest → virtpod/runner:v2", ObservedGeneration: 7}}
	for _, tc := range []struct {
		name       string
		before     []metav1.Condition
		pod        *corev1.Pod
		want       vmv1.Images
		recreating bool
		cond       *want // nil: no ImagesCurrent condition
	}{
		{name: "no pod", pod: nil, want: same},
		{name: "pod ended", before: recreatingBefore, pod: ended, want: newer},
		{name: "current", pod: running, want: same, cond: &want{"True", vmv1.ReasonCurrent, "the runner pod uses the effective images"}},
		{name: "changed", pod: running, want: newer, cond: &want{"False", vmv1.ReasonRestartRequired,
			"runner virtpod/runner:latest → virtpod/runner:v2; they apply at the guest's next start (imageUpdatePolicy Recreate applies them now)"}},
		{name: "being recreated", pod: running, want: newer, recreating: true, cond: &want{"False", vmv1.ReasonRecreating,
			"replacing the runner pod: runner virtpod/runner:latest → virtpod/runner:v2"}},
		{name: "still being recreated", before: recreatingBefore, pod: running, want: newer, cond: &want{"False", vmv1.ReasonRecreating,
			"replacing the runner pod: runner virtpod/runner:latest → virtpod/runner:v2"}},
		{name: "recreated", before: recreatingBefore, pod: running, want: same, cond: &want{"True", vmv1.ReasonCurrent, "the runner pod uses the effective images"}},
	} {
		st := vmv1.VirtualMachineStatus{Conditions: append([]metav1.Condition(nil), tc.before...)}
		setImagesCurrent(&st, 7, tc.pod, tc.want, tc.recreating)
		if st.Images == nil || *st.Images != tc.want {
			t.Errorf("%s: status.images %+v, want %+v", tc.name, st.Images, tc.want)
		}
		if tc.cond == nil {
			if c := meta.FindStatusCondition(st.Conditions, vmv1.ConditionImagesCurrent); c != nil {
				t.Errorf("%s: ImagesCurrent %+v, want none", tc.name, c)
			}
			continue
		}
		check(t, tc.name, st.Conditions, vmv1.ConditionImagesCurrent, *tc.cond)
	}
}

func TestProviderAvailable(t *testing.T) {
	vm := func(accel vmv1.Acceleration) *vmv1.VirtualMachine {
		return &vmv1.VirtualMachine{Spec: vmv1.VirtualMachineSpec{Provider: vmv1.ProviderQEMU, Acceleration: accel}}
	}
	class := func(edit func(*vmv1.ProviderClass)) *vmv1.ProviderClass {
		c := &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: "qemu"}, Spec: vmv1.ProviderClassSpec{Handler: vmv1.ProviderQEMU}}
		edit(c)
		return c
	}
	for _, tc := range []struct {
		name string
		v    verdict
		want want
	}{
		{"no class", judge(vm(vmv1.AccelerationKVM), nil), want{"False", vmv1.ReasonProviderNotFound,
			"ProviderClass qemu does not exist, so no node is offered for it; an admin creates it (kubectl get providerclasses lists those there are)"}},
		{"disabled", judge(vm(vmv1.AccelerationKVM), class(func(c *vmv1.ProviderClass) { c.Spec.Enabled, c.Spec.DisabledReason = ptr.To(false), "host upgrade" })),
			want{"False", vmv1.ReasonProviderDisabled, "ProviderClass qemu is disabled by an admin: host upgrade; a running guest keeps running, but none starts until it is enabled (vmctl provider enable qemu)"}},
		{"emulation not allowed", judge(vm(vmv1.AccelerationEmulated), class(func(*vmv1.ProviderClass) {})), want{"False", vmv1.ReasonEmulationNotAllowed,
			"the VM asks for software emulation and ProviderClass qemu does not allow it (spec.allowEmulation); use acceleration KVM or ask an admin"}},
		{"available", judge(vm(vmv1.AccelerationEmulated), class(func(c *vmv1.ProviderClass) {
			c.Spec.AllowEmulation = true
			c.Status.Conditions = []metav1.Condition{{Type: vmv1.ConditionAvailable, Status: metav1.ConditionTrue, Message: "2/2 nodes fit"}}
		})), want{"True", vmv1.ReasonProviderAvailable, "ProviderClass qemu is enabled; 2/2 nodes fit"}},
		{"runner lacks virtio-fs", judge(sharing(vm(vmv1.AccelerationKVM), ""), class(func(c *vmv1.ProviderClass) {
			c.Spec.AllowedRunnerImages = []string{"example.com/runner-debian13"}
		})), want{"False", vmv1.ReasonRunnerLacksFeature,
			"spec.guest.filesystems needs a runner image with virtiofsd (runner feature VirtioFS); ProviderClass qemu's runner image lacks it (its spec.runnerFeatures: none): remove spec.guest.filesystems, name a runner image that has it in spec.runnerImage (allowed: example.com/runner-debian13), or ask an admin for a class whose runner has it"}},
		{"the class's own runner image named, lacking virtio-fs", judge(sharing(vm(vmv1.AccelerationKVM), "example.com/runner:v1"), class(func(c *vmv1.ProviderClass) {
			c.Spec.RunnerImage = "example.com/runner:v1"
		})), want{"False", vmv1.ReasonRunnerLacksFeature, "spec.guest.filesystems needs a runner image with virtiofsd (runner feature VirtioFS); ProviderClass qemu's runner image lacks it (its spec.runnerFeatures: none): remove spec.guest.filesystems, name a runner image that has it in spec.runnerImage (allowed: none), or ask an admin for a class whose runner has it"}},
		{"the class's runner has virtio-fs", judge(sharing(vm(vmv1.AccelerationKVM), ""), class(func(c *vmv1.ProviderClass) {
			c.Spec.RunnerFeatures = []vmv1.RunnerFeature{vmv1.RunnerFeatureVirtioFS}
		})), want{"True", vmv1.ReasonProviderAvailable, "ProviderClass qemu is enabled"}},
		{"an allowed runner image of the VM's own: the runner judges", judge(sharing(vm(vmv1.AccelerationKVM), "example.com/runner-debian13:v1"), class(func(c *vmv1.ProviderClass) {
			c.Spec.AllowedRunnerImages = []string{"example.com/runner-debian13"}
		})), want{"True", vmv1.ReasonProviderAvailable, "ProviderClass qemu is enabled"}},
		{"no default", noDefault(nil), want{"False", vmv1.ReasonNoDefaultProvider,
			`spec.provider is empty and no ProviderClass is the default (annotation provider.virtpod.io/is-default-class="true"); set spec.provider or ask an admin to mark one`}},
		{"two defaults", noDefault([]string{"cloud-hypervisor", "qemu"}), want{"False", vmv1.ReasonNoDefaultProvider,
			"spec.provider is empty and 2 ProviderClasses claim to be the default ([cloud-hypervisor qemu]); set spec.provider or ask an admin to keep one"}},
	} {
		if tc.v.blocked != (tc.want.status == metav1.ConditionFalse) {
			t.Errorf("%s: blocked = %v", tc.name, tc.v.blocked)
		}
		st := vmv1.VirtualMachineStatus{}
		setProviderAvailable(&st, 7, tc.v)
		check(t, tc.name, st.Conditions, vmv1.ConditionProviderAvailable, tc.want)
	}
}

// sharing gives vm a virtio-fs share and, if not "", its own runner image.
func sharing(vm *vmv1.VirtualMachine, runner string) *vmv1.VirtualMachine {
	vm.Spec.Guest.Filesystems = []vmv1.Filesystem{{Name: "site", EmptyDir: &vmv1.FilesystemEmptyDir{}}}
	vm.Spec.RunnerImage = runner
	return vm
}

func TestSoftwareEmulation(t *testing.T) {
	for accel, w := range map[vmv1.Acceleration]want{
		vmv1.AccelerationKVM: {"False", vmv1.ReasonKVM, "the guest runs with KVM"},
		vmv1.AccelerationEmulated: {"True", vmv1.ReasonEmulationRequested,
			"the guest runs under software emulation (QEMU TCG), many times slower than with KVM, because the VM asked for it"},
	} {
		st := vmv1.VirtualMachineStatus{}
		setSoftwareEmulation(&st, &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Generation: 7}, Spec: vmv1.VirtualMachineSpec{Acceleration: accel}})
		check(t, string(accel), st.Conditions, vmv1.ConditionSoftwareEmulation, w)
	}
}

// TestSetDisksReady: the one setter of DisksReady sets it True, False with the cause, and
// removes it from a VM that names nothing to check, whatever it said before.
func TestSetDisksReady(t *testing.T) {
	missing := &cause{vmv1.ReasonClaimNotFound, `PersistentVolumeClaim "x" does not exist`}
	for _, tc := range []struct {
		name   string
		before []metav1.Condition
		facts  diskFacts
		want   *metav1.Condition // nil: no DisksReady
	}{
		{"nothing named", nil, diskFacts{}, nil},
		{"disks removed", []metav1.Condition{{Type: vmv1.ConditionDisksReady, Status: metav1.ConditionFalse, Reason: vmv1.ReasonClaimNotFound}}, diskFacts{}, nil},
		{"ready", nil, diskFacts{named: true, summary: "claims a ready"},
			&metav1.Condition{Status: metav1.ConditionTrue, Reason: vmv1.ReasonDisksReady, Message: "claims a ready"}},
		{"held", nil, diskFacts{named: true, held: missing, summary: "ignored"},
			&metav1.Condition{Status: metav1.ConditionFalse, Reason: vmv1.ReasonClaimNotFound, Message: missing.message}},
		{"cleared", []metav1.Condition{{Type: vmv1.ConditionDisksReady, Status: metav1.ConditionFalse, Reason: vmv1.ReasonClaimInUse}},
			diskFacts{named: true, summary: "claims a ready"},
			&metav1.Condition{Status: metav1.ConditionTrue, Reason: vmv1.ReasonDisksReady, Message: "claims a ready"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &vmv1.VirtualMachineStatus{Conditions: tc.before}
			setDisksReady(st, 3, tc.facts)
			got := meta.FindStatusCondition(st.Conditions, vmv1.ConditionDisksReady)
			switch {
			case tc.want == nil && got != nil:
				t.Fatalf("DisksReady %+v, want none", got)
			case tc.want == nil:
			case got == nil || got.Status != tc.want.Status || got.Reason != tc.want.Reason || got.Message != tc.want.Message || got.ObservedGeneration != 3:
				t.Fatalf("DisksReady %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestMigratable: the condition follows the verdict (True only when the guest can move), and is
// removed once no guest runs.
func TestMigratable(t *testing.T) {
	cases := []struct {
		name   string
		v      *migratable.Verdict
		status metav1.ConditionStatus // "" = no condition
	}{
		{"no guest", nil, ""},
		{"can move", &migratable.Verdict{Reason: vmv1.ReasonMigratable, Message: "ok"}, metav1.ConditionTrue},
		{"pod network", &migratable.Verdict{Reason: vmv1.ReasonNetworkNotMigratable, Message: "spec.guest.networkMode is Pod"}, metav1.ConditionFalse},
		{"resized", &migratable.Verdict{Reason: vmv1.ReasonGuestResized, Message: "resized"}, metav1.ConditionFalse},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// From a status that had the opposite, so a setter that only sets (or only clears) fails.
			st := &vmv1.VirtualMachineStatus{Conditions: []metav1.Condition{{Type: vmv1.ConditionMigratable, Status: metav1.ConditionUnknown, Reason: "Old"}}}
			setMigratable(st, 3, tc.v)
			c := meta.FindStatusCondition(st.Conditions, vmv1.ConditionMigratable)
			if tc.status == "" {
				if c != nil {
					t.Fatalf("condition %+v kept while no guest runs", c)
				}
				return
			}
			if c == nil || c.Status != tc.status || c.Reason != tc.v.Reason || c.Message != tc.v.Message || c.ObservedGeneration != 3 {
				t.Fatalf("condition %+v, want %s %s %q", c, tc.status, tc.v.Reason, tc.v.Message)
			}
		})
	}
}

// TestResized: status.guest and Resized follow the plan: both removed while no guest runs, the
// guest's size alone for a guest never resized, True only once the resize is done.
func TestResized(t *testing.T) {
	guest := size{2, resource.MustParse("512Mi")}
	old := []metav1.Condition{{Type: vmv1.ConditionResized, Status: metav1.ConditionUnknown, Reason: "Old"}}
	for _, tc := range []struct {
		name string
		plan *resizePlan
		cond *want // nil: no Resized condition
	}{
		{name: "no guest"},
		{name: "never resized", plan: &resizePlan{guest: guest}},
		{name: "in progress", plan: &resizePlan{guest: guest, show: true, condition: cause{vmv1.ReasonResizeInProgress, "resizing"}},
			cond: &want{"False", vmv1.ReasonResizeInProgress, "resizing"}},
		{name: "infeasible", plan: &resizePlan{guest: guest, show: true, condition: cause{vmv1.ReasonResizeInfeasible, "no room"}},
			cond: &want{"False", vmv1.ReasonResizeInfeasible, "no room"}},
		{name: "done", plan: &resizePlan{guest: guest, show: true, done: true, condition: cause{vmv1.ReasonResized, "the guest has 2 CPUs"}},
			cond: &want{"True", vmv1.ReasonResized, "the guest has 2 CPUs"}},
	} {
		// From a status that had both, so a setter that only sets (or only clears) fails.
		st := vmv1.VirtualMachineStatus{Guest: &vmv1.GuestStatus{CPUs: 9}, Conditions: append([]metav1.Condition(nil), old...)}
		setResized(&st, 7, tc.plan)
		switch {
		case tc.plan == nil && st.Guest != nil:
			t.Errorf("%s: status.guest %+v kept while no guest runs", tc.name, st.Guest)
		case tc.plan != nil && (st.Guest == nil || st.Guest.CPUs != guest.cpus || st.Guest.Memory.Cmp(guest.memory) != 0):
			t.Errorf("%s: status.guest %+v, want %s", tc.name, st.Guest, guest)
		}
		if tc.cond == nil {
			if c := meta.FindStatusCondition(st.Conditions, vmv1.ConditionResized); c != nil {
				t.Errorf("%s: Resized %+v, want none", tc.name, c)
			}
			continue
		}
		check(t, tc.name, st.Conditions, vmv1.ConditionResized, *tc.cond)
	}
}
