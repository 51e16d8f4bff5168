package cachelag

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cachelag-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func getPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func getVM(t *testing.T, ns, name string) *vmv1.VirtualMachine {
	t.Helper()
	vm := &vmv1.VirtualMachine{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, vm); err != nil {
		t.Fatal(err)
	}
	return vm
}

func getMig(t *testing.T, mig *vmv1.VirtualMachineMigration) *vmv1.VirtualMachineMigration {
	t.Helper()
	out := &vmv1.VirtualMachineMigration{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(mig), out); err != nil {
		t.Fatal(err)
	}
	return out
}
