package vm_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// reportQEMU makes node's agent report the QEMU version it runs.
func reportQEMU(t *testing.T, node, version string) {
	t.Helper()
	ctx := context.Background()
	hn := &vmv1.HypervisorNode{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(hn), hn); err != nil {
		if err := env.Client.Create(ctx, hn); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), hn) })
	}
	hn.Status = vmv1.HypervisorNodeStatus{HeartbeatTime: metav1.NewTime(clock.Now()), KVM: vmv1.KVMStatus{State: vmv1.KVMUsable},
		Providers: []vmv1.ProviderStatus{{Name: vmv1.ProviderQEMU, Available: true, Version: version}}}
	if err := env.Client.Status().Update(ctx, hn); err != nil {
		t.Fatal(err)
	}
}

// annotateStart writes the guest's start into pod as the node agent does: with the machine
// type its runner reported, or without one (a runner from before the report).
func annotateStart(t *testing.T, pod *corev1.Pod, machine string) {
	t.Helper()
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[vmv1.AnnotationGuestStarted] = clock.Now().UTC().Format(time.RFC3339Nano)
	if machine != "" {
		p.Annotations[vmv1.AnnotationGuestMachine] = machine
	}
	if err := env.Client.Patch(context.Background(), p, patch); err != nil {
		t.Fatal(err)
	}
}

// TestMachineFromTheRunner: the machine type pinned is the one the guest's runner reports, not
// the node's QEMU: a VM whose runner image has QEMU 7.2 on a node whose agent reports 10.0 is
// pinned pc-q35-7.2, and nothing is pinned before the runner's report (a started container
// alone says nothing of the machine).
func TestMachineFromTheRunner(t *testing.T) {
	ns := namespace(t)
	node := "machine-" + ns
	ensureNode(t, node)
	reportQEMU(t, node, "10.0.13")
	vm := create(t, kubeapi.SampleVM(ns, "older"))
	pod := waitPod(t, vm, "")
	bind(t, pod, node)
	started(t, pod)
	reconciled(t, vm, func(v *vmv1.VirtualMachine) { v.Labels = map[string]string{"touched": "yes"} })
	if m := getVM(t, vm).Status.Machine; m != "" {
		t.Fatalf("status.machine %q before the runner reported one", m)
	}
	annotateStart(t, pod, "pc-q35-7.2")
	eventually(t, "status.machine pinned", func() error {
		if m := getVM(t, vm).Status.Machine; m != "pc-q35-7.2" {
			return fmt.Errorf("status.machine %q, want the runner's pc-q35-7.2", m)
		}
		return nil
	})
}

// TestMachinePinned: a QEMU guest whose runner reports no machine (one from before the report)
// is pinned from its first node's QEMU (7.2.22: pc-q35-7.2), and the pin is kept when that
// node's QEMU is upgraded; the next runner pod gets it, so the guest builds the same hardware on
// the newer QEMU.
func TestMachinePinned(t *testing.T) {
	ns := namespace(t)
	node := "machine-" + ns
	ensureNode(t, node)
	reportQEMU(t, node, "7.2.22")
	vm := create(t, kubeapi.SampleVM(ns, "pinned"))
	pod := waitPod(t, vm, "")
	if args := runnerArgs(pod); slices.ContainsFunc(args, hasMachine) {
		t.Fatalf("the first pod, before any start, names a machine: %q", args)
	}
	bind(t, pod, node)
	started(t, pod)
	annotateStart(t, pod, "")
	eventually(t, "status.machine pinned", func() error {
		if m := getVM(t, vm).Status.Machine; m != "pc-q35-7.2" {
			return fmt.Errorf("status.machine %q, want pc-q35-7.2 (status %+v)", m, getVM(t, vm).Status)
		}
		return nil
	})

	reportQEMU(t, node, "10.0.13") // the node's runner image upgraded
	reconciled(t, vm, func(v *vmv1.VirtualMachine) { v.Labels = map[string]string{"touched": "yes"} })
	if m := getVM(t, vm).Status.Machine; m != "pc-q35-7.2" {
		t.Fatalf("after the node's QEMU upgrade: status.machine %q, want it kept", m)
	}
	if err := env.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	next := waitPod(t, vm, pod.UID)
	if args := runnerArgs(next); !slices.Contains(args, "--machine=pc-q35-7.2") {
		t.Fatalf("the next runner pod's arguments %q lack --machine=pc-q35-7.2", args)
	}
}

func hasMachine(a string) bool { return strings.HasPrefix(a, "--machine=") }

func runnerArgs(pod *corev1.Pod) []string {
	for _, c := range pod.Spec.Containers {
		if c.Name == vmv1.RunnerContainer {
			return c.Args
		}
	}
	return nil
}
