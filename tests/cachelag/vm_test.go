package cachelag

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	vmctrl "github.com/virtpod/virtpod/controllers/vm"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestStartAfterStopOnALaggingCache: a VM is stopped (runStrategy Halted: its status lets the pod
// go, then the pod is deleted with its grace period) and started again at once, while the cache
// has not yet delivered the pod's deletion. The reconcile that follows sees the old pod alive and
// not named by the status; it must not take it back as the VM's run (its end would then count as
// a restart the user never had), but wait for it to go and start a new pod.
func TestStartAfterStopOnALaggingCache(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	lag, cached := newLaggingCache(t)
	r := &vmctrl.Reconciler{Client: cached, APIReader: env.Client, Recorder: recorder, Options: podspec.DefaultOptions(),
		Metrics: vmctrl.NewMetrics(prometheus.NewRegistry())}
	vm := kubeapi.SampleVM(ns, "stopstart")
	vm.Labels = map[string]string{labelByHand: "true"}
	if err := env.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	step := func(objs ...client.Object) {
		t.Helper()
		for _, o := range append([]client.Object{vm}, objs...) {
			lag.CaughtUp(t, o)
		}
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(vm)}); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
	}
	for range 3 { // the provider written in, the pod made, ...
		step()
		if p := (&corev1.Pod{}); env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: podspec.PodName(vm.Name)}, p) == nil {
			break
		}
	}
	first := getPod(t, ns, podspec.PodName(vm.Name))
	env.Bind(t, first, env.TestNode(t, "a"))
	env.Kubelet(t, first, kubeapi.RunnerStarted("10.244.0.9"))
	step(first)
	if got := getVM(t, ns, vm.Name); got.Status.Phase != vmv1.PhaseRunning || got.Status.PodUID != string(first.UID) {
		t.Fatalf("the test's premise: the VM runs in its first pod; status %+v", got.Status)
	}

	// Stop: the pod's deletion is the write the cache delivers late.
	lag.Hold(func(obj any) bool {
		p, ok := obj.(*corev1.Pod)
		return ok && p.UID == first.UID && p.DeletionTimestamp != nil
	})
	setRunStrategy(t, vm, vmv1.RunHalted)
	step()
	lag.Holding(t)
	if live := getPod(t, ns, first.Name); live.DeletionTimestamp == nil {
		t.Fatalf("the test's premise: Halted deletes the pod; it is not being deleted")
	}

	// Started again before the cache saw the deletion.
	setRunStrategy(t, vm, vmv1.RunAlways)
	step()
	if got := getVM(t, ns, vm.Name); got.Status.PodUID == string(first.UID) {
		t.Fatalf("the VM took back pod %s, which the stop deleted (the cache did not show it yet): status %+v", first.UID, got.Status)
	}

	// The pod goes (its kubelet ends it) and the cache catches up: a new run, no restart counted.
	lag.Release()
	if err := env.Client.Delete(ctx, first, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	kubeapi.Eventually(t, "a new runner pod", 20*time.Second, func() error {
		step()
		p := &corev1.Pod{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: first.Name}, p); err != nil {
			return err
		}
		if p.UID == first.UID {
			return errors.New("the first pod is still there")
		}
		return nil
	})
	if got := getVM(t, ns, vm.Name); got.Status.RestartCount != 0 {
		t.Errorf("a stop and a start counted as %d restarts; status %+v", got.Status.RestartCount, got.Status)
	}
}

func setRunStrategy(t *testing.T, vm *vmv1.VirtualMachine, s vmv1.RunStrategy) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"runStrategy": s}})
	if err := env.Client.Patch(context.Background(), vm, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
}
