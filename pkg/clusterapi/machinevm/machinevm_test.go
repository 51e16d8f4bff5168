package machinevm_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/clusterapi/machinevm"
	goldenfile "github.com/virtpod/virtpod/tests/golden"
)

func machine() (*infrav1.VirtPodMachine, *clusterv1.Machine) {
	vpm := &infrav1.VirtPodMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "alpha-md-0-x7k2p", UID: "5e0c1d2e-0000-1111-2222-333344445555"},
		Spec: infrav1.VirtPodMachineSpec{VirtualMachine: infrav1.VirtualMachineTemplate{
			ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"pool": "md-0", infrav1.ClusterNameLabel: "spoofed"},
				Annotations: map[string]string{"example.com/owner": "team-a"}},
			Spec: vmv1.VirtualMachineSpec{Acceleration: vmv1.AccelerationKVM, Guest: vmv1.GuestSpec{
				CPUs: 2, Memory: resource.MustParse("2Gi"),
				KernelImage: "registry.example.com/vm/kernel:6.1",
				RootDisk:    vmv1.RootDisk{Image: "registry.example.com/vm/ubuntu-k8s:1.37"}}}}}}
	secret := "alpha-md-0-x7k2p-bootstrap"
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "alpha-md-0-x7k2p"},
		Spec: clusterv1.MachineSpec{ClusterName: "alpha", Bootstrap: clusterv1.Bootstrap{DataSecretName: &secret}}}
	return vpm, m
}

func TestGolden(t *testing.T) {
	cases := map[string]func(*infrav1.VirtPodMachine, *clusterv1.Machine){
		"worker": func(*infrav1.VirtPodMachine, *clusterv1.Machine) {},
		"control-plane-in-zone": func(_ *infrav1.VirtPodMachine, m *clusterv1.Machine) {
			m.Labels = map[string]string{clusterv1.MachineControlPlaneLabel: ""}
			m.Spec.FailureDomain = "zone-b"
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			vpm, m := machine()
			mutate(vpm, m)
			before, _ := yaml.Marshal(vpm)
			out, err := yaml.Marshal(machinevm.Build(vpm, m))
			if err != nil {
				t.Fatal(err)
			}
			goldenfile.Check(t, name+".yaml", out)
			if after, _ := yaml.Marshal(vpm); string(after) != string(before) {
				t.Error("Build changed its VirtPodMachine")
			}
		})
	}
}

func TestProviderIDAndAddresses(t *testing.T) {
	vpm, _ := machine()
	if got := machinevm.ProviderID(vpm); got != "virtpod://tenants/alpha-md-0-x7k2p" {
		t.Errorf("ProviderID = %q", got)
	}
	vm := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "alpha-md-0-x7k2p"}}
	if got := machinevm.Addresses(vm); len(got) != 1 || got[0].Type != clusterv1.MachineHostName {
		t.Errorf("no pod IP yet: %v, want only the hostname", got)
	}
	vm.Status.PodIP = "10.244.1.5"
	got := machinevm.Addresses(vm)
	if len(got) != 2 || got[1].Type != clusterv1.MachineInternalIP || got[1].Address != "10.244.1.5" || !strings.Contains(got[0].Address, "x7k2p") {
		t.Errorf("Addresses = %v", got)
	}
}
