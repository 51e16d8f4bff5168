package cachelag

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/migration"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestMigrationOnALaggingCache: the migration controller marks the source pod as the
// migration's and writes the migration's status; the status write brings the next reconcile at
// once, while the cache has not yet delivered the mark (held back here). That reconcile must not
// take the unmarked copy for a source that is gone: the migration goes on, and the guest moves
// once the cache catches up. (CI at 0dc977c: TestUpgrade's move failed "source pod ... deleted
// during the migration" with the source running.)
func TestMigrationOnALaggingCache(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	vm, source := runningVM(t, ns, "lagged", env.TestNode(t, "a"), nil)
	targetNode := env.TestNode(t, "b")

	lag, cached := newLaggingCache(t)
	r := &migration.Reconciler{Client: cached, APIReader: env.Client, Recorder: recorder, Metrics: migration.NewMetrics(prometheus.NewRegistry())}
	mig := &vmv1.VirtualMachineMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "move"}, Spec: vmv1.VirtualMachineMigrationSpec{VMName: vm.Name}}
	// The source's mark is the write the cache delivers late.
	lag.Hold(func(obj any) bool {
		p, ok := obj.(*corev1.Pod)
		return ok && p.Name == source.Name && p.Annotations[vmv1.AnnotationMigration] != ""
	})
	if err := env.Client.Create(ctx, mig); err != nil {
		t.Fatal(err)
	}
	step := func() {
		t.Helper()
		lag.CaughtUp(t, mig) // the migration's own events are not held: the reconcile that follows a status write sees it
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(mig)}); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
	}
	step() // the finalizer
	step() // start: the source marked, the status Scheduling, the target made
	lag.Holding(t)
	stale := &corev1.Pod{}
	if err := cached.Get(ctx, client.ObjectKeyFromObject(source), stale); err != nil {
		t.Fatal(err)
	}
	if live := getPod(t, ns, source.Name); live.Annotations[vmv1.AnnotationMigration] != string(getMig(t, mig).UID) || stale.Annotations[vmv1.AnnotationMigration] != "" {
		t.Fatalf("the test's premise: the source marked on the API server (%q) and not in the cache (%q)",
			live.Annotations[vmv1.AnnotationMigration], stale.Annotations[vmv1.AnnotationMigration])
	}

	step() // the reconcile the status write brings, on the cache without the mark
	got := getMig(t, mig)
	c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionCompleted)
	if got.Status.Phase != vmv1.MigrationScheduling || c == nil || c.Reason != vmv1.ReasonInProgress || !strings.Contains(c.Message, "waits for a node") {
		t.Fatalf("a migration whose source runs, reconciled before the cache saw the source's mark: status %+v; want Scheduling, its target waiting for a node", got.Status)
	}

	// The cache catches up, and the guest moves as usual.
	lag.Release()
	target := getPod(t, ns, podspec.TargetPodName(vm.Name, got.UID))
	env.Bind(t, target, targetNode)
	env.Kubelet(t, target, kubeapi.RunnerWaiting("10.244.1.9"))
	annotate(t, target, vmv1.AnnotationMigrationReceiver, "10.1.0.2:9440")
	lag.CaughtUp(t, source)
	lag.CaughtUp(t, target)
	step()
	if want := "10.1.0.2:9440/" + string(target.UID); getPod(t, ns, source.Name).Annotations[vmv1.AnnotationMigrateTo] != want {
		t.Fatalf("the source was not told to send to %s: migration status %+v", want, getMig(t, mig).Status)
	}
	report, _ := json.Marshal(map[string]any{"role": "source", "state": "completed", "transferredBytes": 1 << 20, "totalBytes": 1 << 20})
	annotate(t, source, vmv1.AnnotationMigrationState, string(report))
	env.Kubelet(t, target, kubeapi.RunnerStarted("10.244.1.9"))
	lag.CaughtUp(t, source)
	lag.CaughtUp(t, target)
	step()
	if got := getMig(t, mig); got.Status.Phase != vmv1.MigrationSucceeded {
		t.Fatalf("migration status %+v, want Succeeded", got.Status)
	}
	if got := getVM(t, ns, vm.Name); got.Status.PodName != target.Name {
		t.Fatalf("the VM runs in pod %s, want the target %s", got.Status.PodName, target.Name)
	}
}

// TestRefusedTargetLeavesNoClaims: a migration of a VM on a claim makes the target's claim,
// then the API server refuses the target pod (here an admission policy refuses it), so
// the migration fails at once, in the same reconcile, before the cache has the claim it just
// made. The failure's clean-up must still find that claim and delete it: nothing watches claims,
// and a copy left behind holds storage until someone deletes the failed migration.
func TestRefusedTargetLeavesNoClaims(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	if err := kubeapi.BoundClaim(ctx, env.Client, ns, "root"); err != nil {
		t.Fatal(err)
	}
	vm, _ := runningVM(t, ns, "claimed", env.TestNode(t, "a"), func(vm *vmv1.VirtualMachine) {
		vm.Spec.Guest.RootDisk = vmv1.RootDisk{Image: vm.Spec.Guest.RootDisk.Image, PersistentVolumeClaim: &vmv1.RootDiskClaim{ClaimName: "root"}}
	})
	refuseTargetPods(t, ns)

	lag, cached := newLaggingCache(t)
	r := &migration.Reconciler{Client: cached, APIReader: env.Client, Recorder: recorder, Metrics: migration.NewMetrics(prometheus.NewRegistry())}
	lag.Hold(func(obj any) bool {
		c, ok := obj.(*corev1.PersistentVolumeClaim)
		return ok && c.Namespace == ns && c.Annotations[vmv1.AnnotationMigration] != ""
	})
	mig := &vmv1.VirtualMachineMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "refused"}, Spec: vmv1.VirtualMachineMigrationSpec{VMName: vm.Name}}
	if err := env.Client.Create(ctx, mig); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the finalizer, then the start that fails
		lag.CaughtUp(t, mig)
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(mig)}); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
	}
	got := getMig(t, mig)
	if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionCompleted); got.Status.Phase != vmv1.MigrationFailed || c == nil ||
		c.Reason != vmv1.ReasonTargetFailed || !strings.Contains(c.Message, "refused target pod") || len(got.Status.Claims) != 1 {
		t.Fatalf("the test's premise: the migration failed on its refused target, with one claim made; status %+v", got.Status)
	}
	lag.Holding(t)
	made := &corev1.PersistentVolumeClaim{}
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: got.Status.Claims[0].Target}, made)
	if err == nil && made.DeletionTimestamp == nil {
		t.Fatalf("the failed migration left its target claim %s (its clean-up read a cache that did not have it yet)", made.Name)
	} else if client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
}

// refuseTargetPods makes the API server refuse every migration target pod in ns, as a policy or
// a quota of the cluster's might, and waits until it does.
func refuseTargetPods(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	name := "cachelag-refuse-targets-" + ns
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("!has(object.metadata.labels) || !(%q in object.metadata.labels)", vmv1.LabelMigrationRole),
				Message:    "this namespace takes no migration targets"}},
		}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}}}
	for _, o := range []client.Object{policy, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	kubeapi.Eventually(t, "the policy refusing target pods", 20*time.Second, func() error {
		probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe", Labels: map[string]string{vmv1.LabelMigrationRole: "target"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		if err := env.Client.Create(ctx, probe, client.DryRunAll); !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			return fmt.Errorf("a target pod's dry run: %v", err)
		}
		return nil
	})
}

// runningVM creates a migratable VM (mutate may change it) and plays its runner pod onto
// nodeName, started (the scheduler's and the kubelet's parts); it returns the VM running and its
// pod.
func runningVM(t *testing.T, ns, name, nodeName string, mutate func(*vmv1.VirtualMachine)) (*vmv1.VirtualMachine, *corev1.Pod) {
	t.Helper()
	vm := kubeapi.SampleVM(ns, name)
	vm.Spec.Guest.NetworkMode = vmv1.NetworkMasquerade
	if mutate != nil {
		mutate(vm)
	}
	if err := env.Client.Create(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	kubeapi.Eventually(t, "runner pod", 20*time.Second, func() error {
		return env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: podspec.PodName(name)}, pod)
	})
	env.Bind(t, pod, nodeName)
	env.Kubelet(t, pod, kubeapi.RunnerStarted("10.244.0.7"))
	kubeapi.Eventually(t, "VM running", 20*time.Second, func() error {
		if got := getVM(t, ns, name); got.Status.Phase != vmv1.PhaseRunning || meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionMigratable) == nil {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
	return getVM(t, ns, name), getPod(t, ns, pod.Name)
}

// annotate sets a pod annotation as a node agent does.
func annotate(t *testing.T, pod *corev1.Pod, key, value string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err := env.Client.Patch(context.Background(), pod, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
}
