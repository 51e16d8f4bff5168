package virtpodmachine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/clusterapi/virtpodmachine"
	"github.com/virtpod/virtpod/controllers/manager"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// The deletion steps of the reconciler, called directly against a real API server (finalizers,
// deletion timestamps and owner references are the API server's). Cluster API's own kinds are
// not needed: a VirtPodMachine being deleted is not looked up through its Machine.

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

func reconciler(t *testing.T) *virtpodmachine.Reconciler {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	stop := make(chan struct{})
	b.StartRecordingToSink(stop)
	t.Cleanup(func() { close(stop); b.Shutdown() })
	return &virtpodmachine.Reconciler{Client: env.Client, Recorder: b.NewRecorder(manager.Scheme(), "virtpod-capi")}
}

// deleting makes a VirtPodMachine with the finalizer, and a VM of its name made by mkVM (which
// may set an owner), then deletes the VirtPodMachine.
func deleting(t *testing.T, mkVM func(vpm *infrav1.VirtPodMachine, vm *vmv1.VirtualMachine)) (*infrav1.VirtPodMachine, *vmv1.VirtualMachine) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vpmtest-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	vpm := &infrav1.VirtPodMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "m1", Finalizers: []string{virtpodmachine.Finalizer}},
		Spec: infrav1.VirtPodMachineSpec{VirtualMachine: infrav1.VirtualMachineTemplate{Spec: kubeapi.SampleVM(ns.Name, "m1").Spec}}}
	if err := env.Client.Create(ctx, vpm); err != nil {
		t.Fatal(err)
	}
	vm := kubeapi.SampleVM(ns.Name, vpm.Name)
	mkVM(vpm, vm)
	if err := env.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, vpm); err != nil {
		t.Fatal(err)
	}
	return vpm, vm
}

func reconcileOnce(t *testing.T, r *virtpodmachine.Reconciler, vpm *infrav1.VirtPodMachine) {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(vpm)}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
}

func gone(t *testing.T, o client.Object) bool {
	t.Helper()
	err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(o), o)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return apierrors.IsNotFound(err)
}

// TestDeleteLeavesForeignVM: a VirtPodMachine whose VM was replaced by one it does not control
// (here: no owner at all) goes on delete, without touching that VM, and says so in a Warning.
// Before, the finalizer stayed for as long as the other VM did.
func TestDeleteLeavesForeignVM(t *testing.T) {
	r := reconciler(t)
	vpm, vm := deleting(t, func(*infrav1.VirtPodMachine, *vmv1.VirtualMachine) {})
	reconcileOnce(t, r, vpm)
	if !gone(t, vpm) {
		t.Fatalf("the VirtPodMachine is still there, finalizers %v", vpm.Finalizers)
	}
	if gone(t, vm) || vm.DeletionTimestamp != nil {
		t.Fatalf("the foreign VirtualMachine was deleted (deletionTimestamp %v)", vm.DeletionTimestamp)
	}
	kubeapi.Eventually(t, "a Warning naming the VM", 20*time.Second, func() error {
		list := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), list, client.InNamespace(vpm.Namespace)); err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Kind == "VirtPodMachine" && e.Regarding.Name == vpm.Name && e.Type == corev1.EventTypeWarning &&
				e.Reason == infrav1.ReasonVirtualMachineNameTaken && strings.Contains(e.Note, "VirtualMachine "+vm.Name+" does not belong to this VirtPodMachine") {
				return nil
			}
			seen = append(seen, e.Type+" "+e.Reason+": "+e.Note)
		}
		return fmt.Errorf("events: %q", seen)
	})
}

// TestDeleteWaitsForOwnVM: the machine's own VM is deleted first (foreground, so its runner
// pod goes before it); the finalizer stays until the VM is gone.
func TestDeleteWaitsForOwnVM(t *testing.T) {
	r := reconciler(t)
	vpm, vm := deleting(t, func(vpm *infrav1.VirtPodMachine, vm *vmv1.VirtualMachine) {
		vm.OwnerReferences = []metav1.OwnerReference{{APIVersion: infrav1.GroupVersion.String(), Kind: "VirtPodMachine",
			Name: vpm.Name, UID: vpm.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	})
	reconcileOnce(t, r, vpm)
	if gone(t, vm) || vm.DeletionTimestamp == nil {
		t.Fatal("the machine's own VirtualMachine was not deleted")
	}
	if gone(t, vpm) {
		t.Fatal("the VirtPodMachine went before its VirtualMachine")
	}
	// Play the garbage collector: the VM's dependents are gone, so is the VM.
	vm.Finalizers = nil
	if err := env.Client.Update(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	kubeapi.Eventually(t, "the VM gone", 20*time.Second, func() error {
		if !gone(t, vm) {
			return fmt.Errorf("VM still there, finalizers %v", vm.Finalizers)
		}
		return nil
	})
	reconcileOnce(t, r, vpm)
	if !gone(t, vpm) {
		t.Fatalf("the VirtPodMachine is still there after its VM went, finalizers %v", vpm.Finalizers)
	}
}
