package kubeapi

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Bind binds pod to node through the binding subresource, as the scheduler does.
func (e *Env) Bind(t testing.TB, pod *corev1.Pod, node string) {
	t.Helper()
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := e.Client.SubResource("binding").Create(context.Background(), pod, b); err != nil {
		t.Fatal(err)
	}
}

// Kubelet writes the pod's status as a kubelet would, retrying on conflicts.
func (e *Env) Kubelet(t testing.TB, pod *corev1.Pod, mutate func(*corev1.PodStatus)) {
	t.Helper()
	Eventually(t, "pod status written", 20*time.Second, func() error {
		p := &corev1.Pod{}
		if err := e.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
			return err
		}
		mutate(&p.Status)
		return e.Client.Status().Update(context.Background(), p)
	})
}

// RunnerRunning returns a status mutation: the runner container runs and is ready at ip.
func RunnerRunning(ip string) func(*corev1.PodStatus) {
	return func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.PodIP = ip
		s.PodIPs = []corev1.PodIP{{IP: ip}}
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: vmv1.RunnerContainer, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	}
}

// RunnerStarted is RunnerRunning with the runner's startup probe passed: the guest runs.
func RunnerStarted(ip string) func(*corev1.PodStatus) {
	return func(s *corev1.PodStatus) {
		RunnerRunning(ip)(s)
		s.ContainerStatuses[0].Started = ptr.To(true)
	}
}

// RunnerWaiting is a migration target's runner up and waiting for its stream: running, not
// started, not ready.
func RunnerWaiting(ip string) func(*corev1.PodStatus) {
	return func(s *corev1.PodStatus) {
		RunnerRunning(ip)(s)
		s.Conditions[0].Status = corev1.ConditionFalse
		s.ContainerStatuses[0].Ready, s.ContainerStatuses[0].Started = false, ptr.To(false)
	}
}

// TestNode registers a Ready node named after the test and suffix, deleted after it.
func (e *Env) TestNode(t testing.TB, suffix string) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())) + "-" + suffix
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	name = strings.TrimLeft(name, "-")
	if err := CreateNode(context.Background(), e.Client, name); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	return name
}
