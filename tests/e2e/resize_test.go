package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// beyondNode is the least memory, a multiple of the hotplug block, at or above the node's
// allocatable memory: a runner pod for it (the guest's memory plus the runner's overhead) never
// fits the node, yet the guest's virtio-mem region (this less the boot memory) stays below the
// node's RAM, so QEMU maps it also under the kernel's default heuristic overcommit. It is the
// resizable VM's maxMemory.
func beyondNode(t *testing.T, ctx context.Context) resource.Quantity {
	t.Helper()
	nodes := &corev1.NodeList{}
	if err := kube.List(ctx, nodes); err != nil || len(nodes.Items) != 1 {
		t.Fatalf("want the local cluster's one node: %d nodes, %v", len(nodes.Items), err)
	}
	alloc := nodes.Items[0].Status.Allocatable.Memory().Value()
	b := vmv1.MemoryHotplugBlock
	return *resource.NewQuantity((alloc+b-1)/b*b, resource.BinarySI)
}

// guestSizeLine is the guest fixture's own report of its online CPUs and memory, printed on the
// console on every change (tools/dev/guestfixture).
var guestSizeLine = regexp.MustCompile(`VIRTPOD-GUEST-SIZE cpus=\d+ online=(\S+) memory=(\d+)Mi`)

// TestLiveResize: one running guest, resized by patches of its spec as a user does with
// kubectl patch — grow CPUs and memory, shrink memory, a size the node can never fit, and a
// grow while the node agent is replaced. At each step the runner pod is resized in place (same
// pod, no restart), status.guest and the Resized condition agree, and the guest's own report
// on its console shows the size. CPUs only grow: QEMU under TCG cannot add a vCPU again after
// one was removed.
func TestLiveResize(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	vm := newVM(ns, "rs")
	vm.Spec.PodResources = nil // the pod's resources follow the guest's size
	vm.Spec.Guest.MaxCPUs = ptr.To[int32](2)
	resizeMax := beyondNode(t, ctx)
	vm.Spec.Guest.MaxMemory = &resizeMax
	if err := kube.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	before := waitRunning(t, ns, "rs", 0)
	pod := podspec.PodName("rs")
	r := &resizeCheck{t: t, ctx: ctx, ns: ns, uid: types.UID(before.Status.PodUID), pod: pod}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run("-n", ns, "get", "vm/rs", "pod/"+pod, "-o", "yaml")
			agents, _ := run("-n", "virtpod-system", "logs", "-l", "app.kubernetes.io/name=virtpod-agent", "--tail=60")
			t.Logf("at failure:\n%s\nagent:\n%s\nrunner:\n%s", out, agents, tail(podLogs(ns, pod), 80))
		}
	})
	r.guestSees("0", 256)

	// Grow CPUs and memory: the pod first, then the guest.
	r.patch(2, "384Mi")
	r.resized(2, "384Mi")
	r.guestSees("0-1", 384)

	// Shrink memory: the guest gives 128Mi back, then the pod shrinks. The controller's leader
	// is killed as the resize begins: the replica that takes over finishes it.
	r.patch(2, "256Mi")
	killLeader(t)
	r.resized(2, "256Mi")
	r.guestSees("0-1", 256)

	// A size the node can never fit: refused with the reason in the condition, the pod and the
	// guest as they were. Kubernetes v1.37's API server refuses a resize beyond the node's
	// allocatable itself (the kubelet's PodResizePending Infeasible is for what it finds at
	// admission); either's words must be in the condition.
	r.patch(2, resizeMax.String())
	eventually(t, "Resized ResizeInfeasible with the node's reason", 2*time.Minute, func() error {
		vm := getVM(t, ns, "rs")
		c := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionResized)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != vmv1.ReasonResizeInfeasible {
			return fmt.Errorf("Resized %+v", c)
		}
		reason := "node didn't have enough allocatable resources: memory"
		p := r.runnerPod()
		for _, pc := range p.Status.Conditions {
			if pc.Type == corev1.PodResizePending {
				reason = pc.Message
			}
		}
		if err := contains(c.Message, reason); err != nil {
			return err
		}
		return r.guestStatus(vm, 2, "256Mi")
	})
	have := podspec.RunnerResources(r.runnerPod())
	want := podspec.Resources(getVM(t, ns, "rs"), podspec.DefaultOptions(), 2, resource.MustParse("256Mi"))
	if !have.Requests.Memory().Equal(*want.Requests.Memory()) {
		t.Fatalf("the refused resize changed the pod: %v, want %v", have.Requests, want.Requests)
	}
	r.guestSees("0-1", 256)
	// Giving up: back to the size the guest has.
	r.patch(2, "256Mi")
	r.resized(2, "256Mi")

	// The node agent goes away mid-resize and the DaemonSet's new agent finishes it. So that
	// the resize is sure to be asked while no agent runs (a deleted agent pod may still act
	// for its grace period), the DaemonSet is first kept off the node by a node selector, as
	// a rollout or a drain does: its agent pod is deleted. The pod is then resized but the
	// guest is not; once the DaemonSet is back, its new agent grows the guest.
	agent := runningPod(t, ctx, "virtpod-agent")
	keepAgentOff(t, ctx, true)
	eventually(t, "no agent pod", 2*time.Minute, func() error {
		pods := &corev1.PodList{}
		if err := kube.List(ctx, pods, client.InNamespace("virtpod-system"), client.MatchingLabels{"app.kubernetes.io/name": "virtpod-agent"}); err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d agent pods", len(pods.Items))
		}
		return nil
	})
	r.patch(2, "512Mi")
	eventually(t, "the pod resized and the guest asked for 512Mi, with no agent to do it", time.Minute, func() error {
		p := r.runnerPod()
		if p.Annotations[vmv1.AnnotationDesiredMemory] != "512Mi" {
			return fmt.Errorf("annotations %v", p.Annotations)
		}
		return nil
	})
	if vm := getVM(t, ns, "rs"); r.guestStatus(vm, 2, "256Mi") != nil || meta.IsStatusConditionTrue(vm.Status.Conditions, vmv1.ConditionResized) {
		t.Fatalf("the guest grew with no agent: %+v", vm.Status)
	}
	keepAgentOff(t, ctx, false)
	eventually(t, "a new agent pod", 3*time.Minute, func() error {
		if p := runningPod(t, ctx, "virtpod-agent"); p.UID == agent.UID {
			return fmt.Errorf("%s is still the old agent", p.Name)
		}
		return nil
	})
	r.resized(2, "512Mi")
	r.guestSees("0-1", 512)
}

// keepAgentOff adds (on) or removes the e2e node selector that keeps the agent DaemonSet's
// pods off every node; other node selectors stay as they are.
func keepAgentOff(t *testing.T, ctx context.Context, on bool) {
	t.Helper()
	patch := func(v any) error {
		body, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"nodeSelector": map[string]any{"virtpod.io/e2e-no-agent": v}}}}})
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "virtpod-system", Name: "virtpod-agent"}}
		return kube.Patch(ctx, ds, client.RawPatch(types.MergePatchType, body))
	}
	if !on {
		if err := patch(nil); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := patch("true"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = patch(nil) })
}

type resizeCheck struct {
	t       *testing.T
	ctx     context.Context
	ns, pod string
	uid     types.UID
	patched time.Time
}

// patch changes the VM's cpus and memory as `kubectl patch --type merge` does.
func (r *resizeCheck) patch(cpus int32, memory string) {
	r.t.Helper()
	body, _ := json.Marshal(map[string]any{"spec": map[string]any{"guest": map[string]any{"cpus": cpus, "memory": memory}}})
	vm := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "rs"}}
	if err := kube.Patch(r.ctx, vm, client.RawPatch(types.MergePatchType, body)); err != nil {
		r.t.Fatalf("patch to %d CPUs, %s: %v", cpus, memory, err)
	}
	r.patched = time.Now()
}

func (r *resizeCheck) runnerPod() *corev1.Pod {
	r.t.Helper()
	p, err := kubeset.CoreV1().Pods(r.ns).Get(r.ctx, r.pod, metav1.GetOptions{})
	if err != nil {
		r.t.Fatalf("runner pod: %v", err)
	}
	return p
}

func (r *resizeCheck) guestStatus(vm *vmv1.VirtualMachine, cpus int32, memory string) error {
	if g := vm.Status.Guest; g == nil || g.CPUs != cpus || g.Memory.Cmp(resource.MustParse(memory)) != 0 {
		return fmt.Errorf("status.guest %+v, want %d CPUs and %s", vm.Status.Guest, cpus, memory)
	}
	return nil
}

// resized waits for the VM to say the guest has cpus and memory (Resized True, status.guest),
// with its runner pod resized in place to match: same pod, no restart, the container's
// resources (spec and as the kubelet reports them) those of that size.
func (r *resizeCheck) resized(cpus int32, memory string) {
	r.t.Helper()
	var vm *vmv1.VirtualMachine
	eventually(r.t, fmt.Sprintf("the VM resized to %d CPUs and %s", cpus, memory), 3*time.Minute, func() error {
		vm = getVM(r.t, r.ns, "rs")
		c := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionResized)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != vmv1.ReasonResized || c.ObservedGeneration != vm.Generation {
			return fmt.Errorf("Resized %+v (generation %d)", c, vm.Generation)
		}
		if err := r.guestStatus(vm, cpus, memory); err != nil {
			return err
		}
		p := r.runnerPod()
		want := podspec.Resources(vm, podspec.DefaultOptions(), cpus, resource.MustParse(memory))
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name != vmv1.RunnerContainer {
				continue
			}
			if cs.Resources == nil || !cs.Resources.Requests.Memory().Equal(*want.Requests.Memory()) || !cs.Resources.Requests.Cpu().Equal(*want.Requests.Cpu()) {
				return fmt.Errorf("runner container's resources as the kubelet reports them: %+v, want requests %v", cs.Resources, want.Requests)
			}
		}
		return nil
	})
	r.t.Logf("resized to %d CPUs and %s %v after the patch", cpus, memory, time.Since(r.patched).Round(time.Millisecond))
	p := r.runnerPod()
	if p.UID != r.uid || vm.Status.RestartCount != 0 || vm.Status.PodUID != string(r.uid) {
		r.t.Fatalf("the runner pod was replaced: UID %s, VM %+v; want pod %s", p.UID, vm.Status, r.uid)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			r.t.Fatalf("container %s restarted %d times", cs.Name, cs.RestartCount)
		}
	}
}

// guestSees waits for the guest's latest size report on its console (the runner's log) to be
// online CPUs `online` and mib MiB of memory.
func (r *resizeCheck) guestSees(online string, mib int) {
	r.t.Helper()
	eventually(r.t, fmt.Sprintf("the guest reports CPUs %s and %d MiB", online, mib), time.Minute, func() error {
		m := guestSizeLine.FindAllStringSubmatch(podLogs(r.ns, r.pod), -1)
		if len(m) == 0 {
			return fmt.Errorf("no VIRTPOD-GUEST-SIZE line on the console yet")
		}
		last := m[len(m)-1]
		if last[1] != online || last[2] != fmt.Sprint(mib) {
			return fmt.Errorf("the guest reports %s", last[0])
		}
		return nil
	})
}

func tail(s string, lines int) string {
	i := len(s)
	for ; lines > 0 && i > 0; lines-- {
		i = strings.LastIndexByte(s[:i-1], '\n') + 1
		if i == 0 {
			break
		}
	}
	return s[i:]
}
