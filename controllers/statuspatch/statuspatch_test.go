package statuspatch_test

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/manager"
	"github.com/virtpod/virtpod/controllers/statuspatch"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

// counting is a client against the real API server that counts status patches.
func counting(t *testing.T) (client.Client, *int) {
	t.Helper()
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	n := new(int)
	return interceptor.NewClient(c, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			*n++
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	}), n
}

func newVM(t *testing.T) *vmv1.VirtualMachine {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "statuspatch-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	vm := kubeapi.SampleVM(ns.Name, "vm")
	if err := env.Client.Create(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	return vm
}

func read[T client.Object](t *testing.T, obj T) T {
	t.Helper()
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func ready(status metav1.ConditionStatus) []metav1.Condition {
	return []metav1.Condition{{Type: vmv1.ConditionReady, Status: status, Reason: "R", Message: "m", LastTransitionTime: metav1.Now()}}
}

// TestNoRequestWhenUnchanged: an unchanged status costs no request, whatever else differs.
func TestNoRequestWhenUnchanged(t *testing.T) {
	c, patches := counting(t)
	old := read(t, newVM(t))
	next := old.DeepCopy()
	next.Labels = map[string]string{"only": "metadata"}
	next.Spec.Guest.CPUs = 2
	if err := statuspatch.Patch(context.Background(), c, old, next); err != nil || *patches != 0 {
		t.Fatalf("Patch of an unchanged status: err %v, %d requests", err, *patches)
	}
	next.Status.Phase = vmv1.PhasePending
	if err := statuspatch.Patch(context.Background(), c, old, next); err != nil || *patches != 1 {
		t.Fatalf("Patch of a changed status: err %v, %d requests", err, *patches)
	}
	// A second reconcile that finds the status as written sends nothing.
	again := read(t, old.DeepCopy())
	if err := statuspatch.Patch(context.Background(), c, again, again.DeepCopy()); err != nil || *patches != 1 {
		t.Fatalf("Patch after the write: err %v, %d requests", err, *patches)
	}
}

// TestConflictOnStaleObject: a status patch made from an object someone has changed since is
// refused with a conflict, and the newer status stays.
func TestConflictOnStaleObject(t *testing.T) {
	ctx := context.Background()
	stale := read(t, newVM(t))
	fresh := stale.DeepCopy()
	fresh.Status.Phase, fresh.Status.Conditions = vmv1.PhaseRunning, ready(metav1.ConditionTrue)
	if err := statuspatch.Patch(ctx, env.Client, stale, fresh); err != nil {
		t.Fatal(err)
	}
	next := stale.DeepCopy()
	next.Status.Phase, next.Status.Conditions = vmv1.PhaseFailed, ready(metav1.ConditionFalse)
	if err := statuspatch.Patch(ctx, env.Client, stale, next); !apierrors.IsConflict(err) {
		t.Fatalf("Patch from a stale object: %v, want a conflict", err)
	}
	if statuspatch.IgnoreStale(statuspatch.Patch(ctx, env.Client, stale, next)) != nil {
		t.Error("IgnoreStale kept the conflict")
	}
	if got := read(t, stale.DeepCopy()); got.Status.Phase != vmv1.PhaseRunning {
		t.Fatalf("the stale write landed: phase %s", got.Status.Phase)
	}
	// The object the write returned carries the new resourceVersion: a second write of the same
	// reconcile goes through.
	next = fresh.DeepCopy()
	next.Status.RestartCount = 1
	if err := statuspatch.Patch(ctx, env.Client, fresh, next); err != nil {
		t.Fatalf("second write from the object the first returned: %v", err)
	}
}

// TestStoredStatusIsNext: fields cleared in next are cleared on the server, and zero values a
// diff would leave out are written (a ProviderClass's required counts on its first write).
func TestStoredStatusIsNext(t *testing.T) {
	ctx := context.Background()
	old := read(t, newVM(t))
	next := old.DeepCopy()
	next.Status.PodName, next.Status.PodUID, next.Status.Node = "vm-runner", "uid-1", "node-a"
	next.Status.Images = &vmv1.Images{Runner: "r:1", Kernel: "k:1", RootDisk: "d:1"}
	next.Status.LastTermination = &vmv1.Termination{ExitCode: 1, Reason: "Error", Message: "boom"}
	next.Status.Conditions = ready(metav1.ConditionTrue)
	if err := statuspatch.Patch(ctx, env.Client, old, next); err != nil {
		t.Fatal(err)
	}
	old, next = next, next.DeepCopy()
	next.Status.PodUID, next.Status.Node, next.Status.Images = "", "", nil
	next.Status.LastTermination = &vmv1.Termination{ExitCode: 0, Reason: "Completed"} // a nested field cleared
	if err := statuspatch.Patch(ctx, env.Client, old, next); err != nil {
		t.Fatal(err)
	}
	got := read(t, old.DeepCopy())
	if got.Status.PodUID != "" || got.Status.Node != "" || got.Status.Images != nil || got.Status.PodName != "vm-runner" ||
		!reflect.DeepEqual(got.Status.LastTermination, next.Status.LastTermination) {
		t.Fatalf("stored status %+v, want podUID, node, images and lastTermination.message cleared, podName kept", got.Status)
	}

	class := &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: "qemu"}, Spec: vmv1.ProviderClassSpec{Handler: vmv1.ProviderQEMU}}
	if err := env.Client.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	base := read(t, class)
	nc := base.DeepCopy()
	nc.Status.Conditions = []metav1.Condition{{Type: vmv1.ConditionAvailable, Status: metav1.ConditionFalse, Reason: vmv1.ReasonNoNodes, Message: "none", LastTransitionTime: metav1.Now()}}
	// What a diff would send: the counts are 0 before and after, so it leaves them out, and
	// the API server refuses a status without them.
	diff := nc.DeepCopy()
	if err := env.Client.Status().Patch(ctx, diff, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); !apierrors.IsInvalid(err) {
		t.Fatalf("a diff without the required counts: %v, want Invalid (else this test shows nothing)", err)
	}
	if err := statuspatch.Patch(ctx, env.Client, base, nc); err != nil {
		t.Fatalf("first status of a ProviderClass: %v", err)
	}
	if got := read(t, class.DeepCopy()); len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Reason != vmv1.ReasonNoNodes {
		t.Fatalf("stored %+v", got.Status)
	}
}
