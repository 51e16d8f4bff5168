package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

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

// resizeMax is the resizable VM's maxMemory: beyond the node's allocatable memory (about
// 23.5 GiB here), so a step to it is one the kubelet can never fit. The guest's virtio-mem
// region of that size is address space, not memory, until plugged.
const resizeMax = "32Gi"

// guestSizeLine is the guest fixture's own report of its online CPUs and memory, printed on the
// console on every change (tools/dev/guestfixture).
var guestSizeLine = regexp.MustCompile(`VIRTPOD-GUEST-SIZE cpus=(\S+) onlinecpus=\d+ memory=(\d+)Mi`)

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
	vm.Spec.Guest.MaxMemory = ptr.To(resource.MustParse(resizeMax))
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

	// Shrink memory: the guest gives 128Mi back, then the pod shrinks.
	r.patch(2, "256Mi")
	r.resized(2, "256Mi")
	r.guestSees("0-1", 256)

	// A size the node can never fit: the kubelet's refusal in the condition, the guest as it was.
	r.patch(2, resizeMax)
	eventually(t, "Resized ResizeInfeasible with the kubelet's reason", 2*time.Minute, func() error {
		vm := getVM(t, ns, "rs")
		c := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionResized)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != vmv1.ReasonResizeInfeasible {
			return fmt.Errorf("Resized %+v", c)
		}
		// The kubelet's words (PodResizePending Infeasible) are in the message.
		p := r.runnerPod()
		pending := ""
		for _, pc := range p.Status.Conditions {
			if pc.Type == corev1.PodResizePending {
				pending = pc.Message
			}
		}
		if pending == "" {
			return fmt.Errorf("no PodResizePending on the pod: %+v", p.Status.Conditions)
		}
		if err := contains(c.Message, pending, "memory"); err != nil {
			return err
		}
		return r.guestStatus(vm, 2, "256Mi")
	})
	r.guestSees("0-1", 256)
	// Giving up: back to the size the guest has.
	r.patch(2, "256Mi")
	r.resized(2, "256Mi")

	// The node agent is replaced while the VM grows: the DaemonSet's new agent finishes it.
	agent := runningPod(t, ctx, "virtpod-agent")
	if err := kube.Delete(ctx, &agent); err != nil {
		t.Fatal(err)
	}
	r.patch(2, "512Mi")
	eventually(t, "a new agent pod", 3*time.Minute, func() error {
		if p := runningPod(t, ctx, "virtpod-agent"); p.UID == agent.UID {
			return fmt.Errorf("%s is still the old agent", p.Name)
		}
		return nil
	})
	r.resized(2, "512Mi")
	r.guestSees("0-1", 512)
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
			if cs.Name != podspec.RunnerContainer {
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
