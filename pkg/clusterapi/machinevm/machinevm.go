// Package machinevm builds the VirtualMachine of a Cluster API machine from its VirtPodMachine
// and Machine. Pure: no API calls.
package machinevm

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Name is the VirtualMachine's name: the VirtPodMachine's.
func Name(vpm *infrav1.VirtPodMachine) string { return vpm.Name }

// ProviderID is the providerID of the machine: virtpod://<namespace>/<vm-name>.
func ProviderID(vpm *infrav1.VirtPodMachine) string {
	return infrav1.ProviderIDPrefix + vpm.Namespace + "/" + Name(vpm)
}

// Build returns the VirtualMachine for vpm, owned by it. The Machine supplies the cluster's name,
// the control-plane label, the bootstrap Secret (by name only: its data never enters the VM) and
// the failure domain, which pins the VM to nodes of that zone.
func Build(vpm *infrav1.VirtPodMachine, m *clusterv1.Machine) *vmv1.VirtualMachine {
	t := vpm.Spec.VirtualMachine
	labels := maps.Clone(t.ObjectMeta.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[infrav1.ClusterNameLabel] = m.Spec.ClusterName
	if _, ok := m.Labels[infrav1.ControlPlaneLabel]; ok {
		labels[infrav1.ControlPlaneLabel] = ""
	}
	vm := &vmv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   vpm.Namespace,
			Name:        Name(vpm),
			Labels:      labels,
			Annotations: maps.Clone(t.ObjectMeta.Annotations),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vpm,
				infrav1.GroupVersion.WithKind("VirtPodMachine"))},
		},
		Spec: *t.Spec.DeepCopy(),
	}
	if m.Spec.Bootstrap.DataSecretName != nil {
		vm.Spec.Guest.CloudInit = &vmv1.CloudInit{
			SecretRef:   vmv1.SecretReference{Name: *m.Spec.Bootstrap.DataSecretName},
			UserDataKey: vmv1.DefaultUserDataKey, // the bootstrap Secret's key
		}
	}
	if fd := m.Spec.FailureDomain; fd != "" {
		if vm.Spec.NodeSelector == nil {
			vm.Spec.NodeSelector = map[string]string{}
		}
		vm.Spec.NodeSelector[corev1.LabelTopologyZone] = fd
	}
	return vm
}

// Addresses are the machine's addresses as Cluster API lists them: the VM's name as its
// hostname and its pod IP as its internal IP.
func Addresses(vm *vmv1.VirtualMachine) clusterv1.MachineAddresses {
	out := clusterv1.MachineAddresses{{Type: clusterv1.MachineHostName, Address: vm.Name}}
	if vm.Status.PodIP != "" {
		out = append(out, clusterv1.MachineAddress{Type: clusterv1.MachineInternalIP, Address: vm.Status.PodIP})
	}
	return out
}
