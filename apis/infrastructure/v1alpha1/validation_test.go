package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

func machine(ns, name string) *infrav1.VirtPodMachine {
	return &infrav1.VirtPodMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: infrav1.VirtPodMachineSpec{VirtualMachine: infrav1.VirtualMachineTemplate{Spec: kubeapi.SampleVM(ns, name).Spec}}}
}

// refused checks the API server refused err with a message naming field and stating hint.
func refused(t *testing.T, err error, field, hint string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want Invalid naming %s, got %v", field, err)
	}
	if !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), hint) {
		t.Errorf("error does not name %q with %q:\n%v", field, hint, err)
	}
}

func TestRejectsBadSpecs(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		obj   func() client.Object
		field string
		hint  string
	}{
		{"unknown service type", func() client.Object {
			return &infrav1.VirtPodCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c1"},
				Spec: infrav1.VirtPodClusterSpec{ControlPlaneService: infrav1.ControlPlaneService{Type: "ExternalName"}}}
		}, "spec.controlPlaneService.type", `"ClusterIP", "NodePort", "LoadBalancer"`},
		{"endpoint port out of range", func() client.Object {
			return &infrav1.VirtPodCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c2"},
				Spec: infrav1.VirtPodClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "h", Port: 70000}}}
		}, "spec.controlPlaneEndpoint.port", "less than or equal to 65535"},
		{"empty failure domain", func() client.Object {
			return &infrav1.VirtPodCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c3"},
				Spec: infrav1.VirtPodClusterSpec{FailureDomains: []infrav1.FailureDomain{{Name: ""}}}}
		}, "spec.failureDomains[0].name", "at least 1"},
		{"cloud-init in the template", func() client.Object {
			m := machine("default", "m1")
			m.Spec.VirtualMachine.Spec.Guest.CloudInit = &vmv1.CloudInit{SecretRef: vmv1.SecretReference{Name: "mine"}}
			return m
		}, "spec.virtualMachine.spec.guest.cloudInit", "set by virtpod from the Machine's bootstrap data"},
		{"bad VM in the template", func() client.Object {
			m := machine("default", "m2")
			m.Spec.VirtualMachine.Spec.Guest.CPUs = 0
			return m
		}, "spec.virtualMachine.spec.guest.cpus", "greater than or equal to 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			refused(t, env.Client.Create(ctx, c.obj()), c.field, c.hint)
		})
	}
}

func TestMachineSpecIsImmutable(t *testing.T) {
	ctx := context.Background()
	m := machine("default", "immutable")
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	m.Spec.ProviderID = "virtpod://default/immutable"
	if err := env.Client.Update(ctx, m); err != nil {
		t.Fatalf("setting providerID once: %v", err)
	}
	cases := []struct {
		name   string
		mutate func(*infrav1.VirtPodMachine)
		field  string
		hint   string
	}{
		{"providerID changed", func(m *infrav1.VirtPodMachine) { m.Spec.ProviderID = "virtpod://default/other" }, "spec", "providerID is set once"},
		{"providerID cleared", func(m *infrav1.VirtPodMachine) { m.Spec.ProviderID = "" }, "spec", "providerID is set once"},
		{"VM template changed", func(m *infrav1.VirtPodMachine) { m.Spec.VirtualMachine.Spec.Guest.CPUs = 4 }, "spec.virtualMachine", "roll the MachineDeployment"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fresh := &infrav1.VirtPodMachine{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(m), fresh); err != nil {
				t.Fatal(err)
			}
			c.mutate(fresh)
			refused(t, env.Client.Update(ctx, fresh), c.field, c.hint)
		})
	}
}

func TestCRDsDeclareTheContract(t *testing.T) {
	for _, kind := range []string{"virtpodclusters", "virtpodclustertemplates", "virtpodmachines", "virtpodmachinetemplates"} {
		crd := &metav1.PartialObjectMetadata{}
		crd.SetGroupVersionKind(apiextensionsCRD)
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: kind + ".infrastructure.cluster.x-k8s.io"}, crd); err != nil {
			t.Fatal(err)
		}
		if got := crd.Labels["cluster.x-k8s.io/v1beta2"]; got != "v1alpha1" {
			t.Errorf("%s: label cluster.x-k8s.io/v1beta2=%q, want v1alpha1 (Cluster API reads the contract version from it)", kind, got)
		}
	}
}

var apiextensionsCRD = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
