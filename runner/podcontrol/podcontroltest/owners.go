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
