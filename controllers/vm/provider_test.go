package vm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// editClass changes a ProviderClass as an admin does and returns a function that undoes it.
func editClass(t *testing.T, name string, edit func(*vmv1.ProviderClassSpec)) func() {
	t.Helper()
	var before vmv1.ProviderClassSpec
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pc := &vmv1.ProviderClass{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, pc); err != nil {
			return err
		}
		before = *pc.Spec.DeepCopy()
		edit(&pc.Spec)
		return env.Client.Update(context.Background(), pc)
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() { editClass(t, name, func(s *vmv1.ProviderClassSpec) { *s = before }) }
}

func providerCond(t *testing.T, vm *vmv1.VirtualMachine, status metav1.ConditionStatus, reason, msg string) *vmv1.VirtualMachine {
	t.Helper()
	var got *vmv1.VirtualMachine
	eventually(t, fmt.Sprintf("ProviderAvailable=%s/%s", status, reason), func() error {
		got = getVM(t, vm)
		c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionProviderAvailable)
		if c == nil || c.Status != status || c.Reason != reason || !strings.Contains(c.Message, msg) {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	return got
}

func noPod(t *testing.T, vm *vmv1.VirtualMachine) {
	t.Helper()
	if _, err := runnerPod(vm); !apierrors.IsNotFound(err) {
		t.Fatalf("a runner pod exists for a VM that must not start: %v", err)
	}
}

// TestDefaultProviderSetAtAdmission: a VM that names no provider is created already pinned to
// the default class (config/admission's MutatingAdmissionPolicy, reading the class's
// status.default), so a later change of default never moves it and the controller writes no
// spec; emulation is said out loud.
func TestDefaultProviderSetAtAdmission(t *testing.T) {
	ns := namespace(t)
	defaultClass(t, "qemu")
	vm := kubeapi.SampleVM(ns, "defaulted")
	if err := env.Client.Create(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	if vm.Spec.Provider != vmv1.ProviderQEMU {
		t.Fatalf("spec.provider as created: %q, want qemu set at admission", vm.Spec.Provider)
	}
	if vm.Generation != 1 {
		t.Fatalf("generation %d as created", vm.Generation)
	}
	got := providerCond(t, vm, metav1.ConditionTrue, "ProviderAvailable", "ProviderClass qemu is enabled")
	if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionSoftwareEmulation); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("SoftwareEmulation condition: %+v", c)
	}
	waitEvent(t, vm, "Normal CreatedPod: Created runner pod "+vm.Name+"-runner (provider qemu)")
	if got := getVM(t, vm); got.Generation != 1 {
		t.Fatalf("the controller wrote the spec (generation %d)", got.Generation)
	}
}

// TestDefaultProviderWrittenIntoSpec: without the admission policy (an API server without
// MutatingAdmissionPolicy, or config/admission not applied), the controller writes the default
// class's provider into the spec itself, once.
func TestDefaultProviderWrittenIntoSpec(t *testing.T) {
	ctx := context.Background()
	unbind(t, "MutatingAdmissionPolicyBinding", "virtpod-default-provider")
	ns := namespace(t)
	// The API server drops the binding from its informer a moment later: until then a dry run
	// still comes back defaulted.
	eventually(t, "the policy unbound", func() error {
		vm := kubeapi.SampleVM(ns, "probe")
		if err := env.Client.Create(ctx, vm, client.DryRunAll); err != nil {
			return err
		}
		if vm.Spec.Provider != "" {
			return fmt.Errorf("still defaulted at admission")
		}
		return nil
	})
	vm := create(t, kubeapi.SampleVM(ns, "defaulted"))
	eventually(t, "spec.provider defaulted", func() error {
		if p := getVM(t, vm).Spec.Provider; p != vmv1.ProviderQEMU {
			return fmt.Errorf("spec.provider %q", p)
		}
		return nil
	})
	waitEvent(t, vm, "Normal CreatedPod: Created runner pod "+vm.Name+"-runner (provider qemu)")
}

// unbind deletes one of config/admission's bindings for the rest of the test, as on a cluster
// where it was never applied, and puts it back afterwards.
func unbind(t *testing.T, kind, name string) {
	t.Helper()
	ctx := context.Background()
	binding := &unstructured.Unstructured{}
	binding.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind(kind))
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, binding); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		binding.SetResourceVersion("")
		if err := env.Client.Create(ctx, binding); err != nil {
			t.Error(err)
		}
	})
}

// defaultClass waits until the controller has marked name as the one default class.
func defaultClass(t *testing.T, name string) {
	t.Helper()
	eventually(t, "ProviderClass "+name+" status.default", func() error {
		pc := &vmv1.ProviderClass{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, pc); err != nil {
			return err
		}
		if !pc.Status.Default {
			return fmt.Errorf("status.default false")
		}
		return nil
	})
}

// TestMissingClassStartsNothing: a VM asking for a provider no class offers gets no pod and a
// reason, never another provider.
func TestMissingClassStartsNothing(t *testing.T) {
	vm := kubeapi.SampleVM(namespace(t), "wants-ch")
	vm.Spec.Provider, vm.Spec.Acceleration = vmv1.ProviderCloudHypervisor, vmv1.AccelerationKVM
	create(t, vm)
	got := providerCond(t, vm, metav1.ConditionFalse, "ProviderNotFound", "ProviderClass cloud-hypervisor does not exist")
	if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionScheduled); c == nil || c.Reason != "ProviderNotFound" || got.Status.Phase != vmv1.PhasePending {
		t.Fatalf("status %+v", got.Status)
	}
	noPod(t, vm)
}

// TestDisabledClassBlocksNewStartsOnly: disabling qemu stops new VMs with the admin's reason;
// a running VM keeps its pod and is told; enabling lets the waiting VM start.
func TestDisabledClassBlocksNewStartsOnly(t *testing.T) {
	ns := namespace(t)
	up := create(t, kubeapi.SampleVM(ns, "running"))
	pod := waitPod(t, up, "")
	bind(t, pod, "node-a")
	kubelet(t, pod, running)
	condition(t, up, vmv1.PhaseRunning, vmv1.ConditionReady, metav1.ConditionTrue, "GuestRunning")

	undo := editClass(t, "qemu", func(s *vmv1.ProviderClassSpec) { s.Enabled, s.DisabledReason = ptr.To(false), "host upgrade" })
	t.Cleanup(undo)
	// Once the controller has seen the change (the running VM is told), a new VM is refused.
	providerCond(t, up, metav1.ConditionFalse, "ProviderDisabled", "a running guest keeps running")
	waiting := create(t, kubeapi.SampleVM(ns, "waiting"))
	providerCond(t, waiting, metav1.ConditionFalse, "ProviderDisabled", "ProviderClass qemu is disabled by an admin: host upgrade")
	noPod(t, waiting)
	if p, err := runnerPod(up); err != nil || p.UID != pod.UID || p.DeletionTimestamp != nil {
		t.Fatalf("disabling the class touched a running VM's pod: %v", err)
	}
	if got := getVM(t, up); got.Status.Phase != vmv1.PhaseRunning {
		t.Fatalf("running VM phase %s", got.Status.Phase)
	}

	undo()
	waitPod(t, waiting, "")
	providerCond(t, up, metav1.ConditionTrue, "ProviderAvailable", "")
}

// TestEmulationNeedsTheClassToAllowIt: Emulated runs only where the class allows emulation.
func TestEmulationNeedsTheClassToAllowIt(t *testing.T) {
	ns := namespace(t)
	witness := create(t, kubeapi.SampleVM(ns, "witness"))
	providerCond(t, witness, metav1.ConditionTrue, "ProviderAvailable", "")
	t.Cleanup(editClass(t, "qemu", func(s *vmv1.ProviderClassSpec) { s.AllowEmulation = false }))
	providerCond(t, witness, metav1.ConditionFalse, "EmulationNotAllowed", "")
	vm := create(t, kubeapi.SampleVM(ns, "emulated"))
	providerCond(t, vm, metav1.ConditionFalse, "EmulationNotAllowed", "does not allow it (spec.allowEmulation)")
	noPod(t, vm)
}

// TestWhyNotFromNodeReports: when the scheduler cannot place the pod, the VM says which nodes
// lack what, from the node agents' reports.
func TestWhyNotFromNodeReports(t *testing.T) {
	ctx := context.Background()
	ch := &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: "cloud-hypervisor"}, Spec: vmv1.ProviderClassSpec{Handler: vmv1.ProviderCloudHypervisor}}
	if err := env.Client.Create(ctx, ch); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Client.Delete(ctx, ch) }()
	for _, n := range []struct {
		name string
		kvm  vmv1.KVMState
		ch   bool
	}{{"only-qemu", vmv1.KVMUsable, false}, {"pvm", vmv1.KVMUnusable, true}} {
		if err := env.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}); err != nil {
			t.Fatal(err)
		}
		hv := &vmv1.HypervisorNode{ObjectMeta: metav1.ObjectMeta{Name: n.name}}
		if err := env.Client.Create(ctx, hv); err != nil {
			t.Fatal(err)
		}
		hv.Status = vmv1.HypervisorNodeStatus{HeartbeatTime: metav1.NewTime(clock.Now()), KVM: vmv1.KVMStatus{State: n.kvm},
			Providers: []vmv1.ProviderStatus{{Name: vmv1.ProviderCloudHypervisor, Available: n.ch, Version: "48.0"}}}
		if err := env.Client.Status().Update(ctx, hv); err != nil {
			t.Fatal(err)
		}
	}
	vm := kubeapi.SampleVM(namespace(t), "ch")
	vm.Spec.Provider, vm.Spec.Acceleration = vmv1.ProviderCloudHypervisor, vmv1.AccelerationKVM
	create(t, vm)
	pod := waitPod(t, vm, "")
	kubelet(t, pod, func(s *corev1.PodStatus) {
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
			Message: "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."}}
	})
	eventually(t, "why-not summary", func() error {
		c := meta.FindStatusCondition(getVM(t, vm).Status.Conditions, vmv1.ConditionScheduled)
		want := "virtpod: 0/2 nodes fit: 1 without cloud-hypervisor, 1 without usable KVM"
		if c == nil || !strings.Contains(c.Message, want) || !strings.Contains(c.Message, "didn't match Pod's node affinity") {
			return fmt.Errorf("Scheduled condition %+v, want it to contain %q", c, want)
		}
		return nil
	})

}
