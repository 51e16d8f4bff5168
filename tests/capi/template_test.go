package capi

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestTemplateCapacity: a VirtPodMachineTemplate reports what a node made from it brings
// (status.capacity, status.nodeInfo), which the cluster autoscaler reads to scale a
// MachineDeployment up from zero; a status someone overwrites is put back.
func TestTemplateCapacity(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	vm := kubeapi.SampleVM(ns, "worker").Spec
	vm.Guest.CPUs, vm.Guest.Memory = 2, resource.MustParse("3Gi")
	tpl := &infrav1.VirtPodMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workers"},
		Spec: infrav1.VirtPodMachineTemplateSpec{Template: infrav1.VirtPodMachineTemplateResource{
			Spec: infrav1.VirtPodMachineSpec{VirtualMachine: infrav1.VirtualMachineTemplate{Spec: vm}}}}}
	if err := env.Client.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	reported := func() {
		t.Helper()
		eventually(t, "status.capacity and status.nodeInfo", func() error {
			s := get(t, tpl.DeepCopy()).Status
			cpu, mem := s.Capacity[corev1.ResourceCPU], s.Capacity[corev1.ResourceMemory]
			if cpu.String() != "2" || mem.String() != "3Gi" || len(s.Capacity) != 2 {
				return fmt.Errorf("capacity %v, want cpu 2 and memory 3Gi", s.Capacity)
			}
			if s.NodeInfo == nil || s.NodeInfo.Architecture != "amd64" || s.NodeInfo.OperatingSystem != "linux" {
				return fmt.Errorf("nodeInfo %+v, want amd64 linux", s.NodeInfo)
			}
			return nil
		})
	}
	reported()

	edited := get(t, tpl.DeepCopy())
	edited.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}
	if err := env.Client.Status().Update(ctx, edited); err != nil {
		t.Fatal(err)
	}
	reported()
	// The machine spec under the template cannot change: a new template is the way to resize.
	changed := get(t, tpl.DeepCopy())
	changed.Spec.Template.Spec.VirtualMachine.Spec.Guest.CPUs = 4
	if err := env.Client.Update(ctx, changed); err == nil {
		t.Error("the API server let a template's VM spec change; its capacity would no longer describe its machines")
	}
}
