package podcontroltest

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// Namespace creates a namespace named prefix and a random suffix, and returns its name.
func Namespace(t testing.TB, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// Current is pod as the API server has it now.
func Current(t testing.TB, c client.Reader, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	cur := &corev1.Pod{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), cur); err != nil {
		t.Fatal(err)
	}
	return cur
}

// VM creates VirtualMachine namespace/name (kubeapi.SampleVM), as the pods the node agent acts
// for need one controlling them.
func VM(t testing.TB, c client.Client, namespace, name string) *vmv1.VirtualMachine {
	t.Helper()
	vm := kubeapi.SampleVM(namespace, name)
	if err := c.Create(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	return vm
}

// Own makes vm pod's controller, as pkg/podspec does; call it before creating pod.
func Own(pod *corev1.Pod, vm *vmv1.VirtualMachine) {
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: vmv1.GroupVersion.String(), Kind: "VirtualMachine",
		Name: vm.Name, UID: vm.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
}

// Name writes pod (created) as vm's runner pod in its status, as the VM controller does.
func Name(t testing.TB, c client.Client, vm *vmv1.VirtualMachine, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	cur := &vmv1.VirtualMachine{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(vm), cur); err != nil {
		t.Fatal(err)
	}
	cur.Status.PodName, cur.Status.PodUID, cur.Status.Node = pod.Name, string(pod.UID), pod.Spec.NodeName
	if err := c.Status().Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
}

// RunnerPod creates a running runner pod namespace/name on node with the runner's args, which a
// VM (made for it) names unless foreign: the pods a node agent's executor follows.
func RunnerPod(t testing.TB, c client.Client, namespace, name, node string, foreign bool, args ...string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{vmv1.LabelManagedBy: vmv1.ManagedBy}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: vmv1.RunnerContainer, Image: "runner", Args: args}}}}
	var vm *vmv1.VirtualMachine
	if !foreign {
		vm = VM(t, c, namespace, name)
		Own(pod, vm)
	}
	if err := c.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning}
	if err := c.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if vm != nil {
		Name(t, c, vm, pod)
	}
	return pod
}
