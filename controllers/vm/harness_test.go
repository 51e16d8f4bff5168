package vm_test

// What the controller's tests against the real API server share: namespaces, waiting, reading
// what the controller made, and playing the kubelet's and the scheduler's parts.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vmtest-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// eventually retries check until it returns nil or the timeout passes; it is how a test waits
// for the controller, never a sleep.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	kubeapi.Eventually(t, what, 20*time.Second, check)
}

func getVM(t *testing.T, vm *vmv1.VirtualMachine) *vmv1.VirtualMachine {
	t.Helper()
	out := &vmv1.VirtualMachine{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(vm), out); err != nil {
		t.Fatal(err)
	}
	return out
}

func runnerPod(vm *vmv1.VirtualMachine) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: vm.Namespace, Name: podspec.PodName(vm.Name)}, pod)
	return pod, err
}

func waitPod(t *testing.T, vm *vmv1.VirtualMachine, not types.UID) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, "runner pod created", func() error {
		p, err := runnerPod(vm)
		if err != nil {
			return err
		}
		if p.UID == not {
			return fmt.Errorf("still the old pod %s", not)
		}
		pod = p
		return nil
	})
	return pod
}

// condition waits until the VM has the phase and the condition with the status and reason.
func condition(t *testing.T, vm *vmv1.VirtualMachine, phase vmv1.Phase, ctype string, status metav1.ConditionStatus, reason string) *vmv1.VirtualMachine {
	t.Helper()
	var got *vmv1.VirtualMachine
	eventually(t, fmt.Sprintf("phase %s with %s=%s/%s", phase, ctype, status, reason), func() error {
		got = getVM(t, vm)
		c := meta.FindStatusCondition(got.Status.Conditions, ctype)
		if got.Status.Phase != phase || c == nil || c.Status != status || c.Reason != reason {
			return fmt.Errorf("status is %+v", got.Status)
		}
		return nil
	})
	return got
}

// bind places the pod on a node as the scheduler does, through the binding subresource.
func bind(t *testing.T, pod *corev1.Pod, node string) {
	t.Helper()
	ensureNode(t, node)
	env.Bind(t, pod, node)
}

// ensureNode registers a Ready node for the test's pods (the controller reads the node's
// health) and deletes it after the test.
func ensureNode(t *testing.T, name string) {
	t.Helper()
	err := kubeapi.CreateNode(context.Background(), env.Client, name)
	if apierrors.IsAlreadyExists(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
}

// reconciled applies edit to the VM and waits until the controller has recorded the new
// generation: a reconcile ran after the edit, whatever else it did or did not do.
func reconciled(t *testing.T, vm *vmv1.VirtualMachine, edit func(*vmv1.VirtualMachine)) {
	t.Helper()
	var got *vmv1.VirtualMachine
	// The controller's status writes move the resourceVersion too: retry as kubectl edit would.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got = getVM(t, vm)
		edit(got)
		return env.Client.Update(context.Background(), got)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "status records the edit", func() error {
		if st := getVM(t, vm).Status; st.ObservedGeneration < got.Generation {
			return fmt.Errorf("observedGeneration %d, want %d", st.ObservedGeneration, got.Generation)
		}
		return nil
	})
}

// podCreations counts the runner pods created in ns from now on, from a watch.
func podCreations(t *testing.T, ns string) func() int {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	var mu sync.Mutex
	uids := map[types.UID]bool{}
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
				mu.Lock()
				uids[p.UID] = true
				mu.Unlock()
			}
		}
	}()
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(uids)
	}
}

// kubelet writes pod status as the kubelet would.
func kubelet(t *testing.T, pod *corev1.Pod, mutate func(*corev1.PodStatus)) {
	t.Helper()
	env.Kubelet(t, pod, mutate)
}

var running = kubeapi.RunnerRunning("10.244.0.7")

func ended(code int32, reason, message string) func(*corev1.PodStatus) {
	return func(s *corev1.PodStatus) {
		s.Phase = corev1.PodFailed
		if code == 0 {
			s.Phase = corev1.PodSucceeded
		}
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: vmv1.RunnerContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: reason, Message: message, FinishedAt: metav1.NewTime(clock.Now())}}}}
	}
}

// vmEvents lists the events about vm, in the server's order.
func vmEvents(t *testing.T, vm *vmv1.VirtualMachine) []eventsv1.Event {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(vm.Namespace)); err != nil {
		t.Fatal(err)
	}
	var about []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == vm.Name && e.Regarding.Kind == "VirtualMachine" {
			about = append(about, e)
		}
	}
	return about
}

// timedEvents is events with each one's time and the pod it relates to, for a failure's log.
func timedEvents(t *testing.T, vm *vmv1.VirtualMachine) string {
	t.Helper()
	var b strings.Builder
	for _, e := range vmEvents(t, vm) {
		var related types.UID
		if e.Related != nil {
			related = e.Related.UID
		}
		fmt.Fprintf(&b, "%s %s %s (related %s, series %v): %s\n", e.EventTime.UTC().Format(time.RFC3339Nano), e.Type, e.Reason, related, e.Series, e.Note)
	}
	return b.String()
}

func events(t *testing.T, vm *vmv1.VirtualMachine) string {
	t.Helper()
	var b strings.Builder
	for _, e := range vmEvents(t, vm) {
		fmt.Fprintf(&b, "%s %s: %s\n", e.Type, e.Reason, e.Note)
	}
	return b.String()
}

// waitEvent waits for an event about vm whose text contains want; events are written asynchronously.
func waitEvent(t *testing.T, vm *vmv1.VirtualMachine, want string) string {
	t.Helper()
	var ev string
	eventually(t, "event "+want, func() error {
		if ev = events(t, vm); !strings.Contains(ev, want) {
			return fmt.Errorf("events:\n%s", ev)
		}
		return nil
	})
	return ev
}

func create(t *testing.T, vm *vmv1.VirtualMachine) *vmv1.VirtualMachine {
	t.Helper()
	if err := env.Client.Create(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	return vm
}
