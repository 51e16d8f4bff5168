package capi

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	if err := env.Client.Update(ctx, changed); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.template of a VirtPodMachineTemplate is immutable") {
		t.Errorf("a template's VM spec changed: %v; want it refused as immutable (its capacity would no longer describe its machines)", err)
	}
}

// TestTemplateTopologyDryRun: a VirtPodMachineTemplate never changes, but Cluster API's
// topology controller (ClusterClass) must be able to ask the API server what a change would
// give: it server-side-applies the new spec as a dry run, annotated
// topology.cluster.x-k8s.io/dry-run, and rotates to a new template when the result differs.
// That dry run is admitted whatever it changes (acceleration, cpus and memory without maximums,
// the disk's size: rules a VM has); any other change, dry run or not, is refused, naming the fix.
func TestTemplateTopologyDryRun(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	vm := kubeapi.SampleVM(ns, "worker").Spec
	tpl := &infrav1.VirtPodMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "md-0-abcde"},
		Spec: infrav1.VirtPodMachineTemplateSpec{Template: infrav1.VirtPodMachineTemplateResource{
			Spec: infrav1.VirtPodMachineSpec{VirtualMachine: infrav1.VirtualMachineTemplate{Spec: vm}}}}}
	if err := env.Client.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	desired := func(dryRunAnnotation bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": infrav1.GroupVersion.String(), "kind": "VirtPodMachineTemplate",
			"metadata": map[string]any{"namespace": ns, "name": tpl.Name},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"virtualMachine": map[string]any{"spec": map[string]any{
				"acceleration": "KVM",
				"guest": map[string]any{"cpus": int64(2), "memory": "2Gi", "kernelImage": vm.Guest.KernelImage,
					"rootDisk": map[string]any{"image": vm.Guest.RootDisk.Image, "size": "4Gi"}}}}}}}}}
		if dryRunAnnotation {
			u.SetAnnotations(map[string]string{clusterv1.TopologyDryRunAnnotation: ""})
		}
		return u
	}
	apply := func(u *unstructured.Unstructured, opts ...client.ApplyOption) error {
		return env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), append(opts, client.FieldOwner("capi-topology"), client.ForceOwnership)...)
	}

	u := desired(true)
	if err := apply(u, client.DryRunAll); err != nil {
		t.Fatalf("the topology controller's dry run refused: %v", err)
	}
	if got, _, _ := unstructured.NestedInt64(u.Object, "spec", "template", "spec", "virtualMachine", "spec", "guest", "cpus"); got != 2 {
		t.Errorf("the dry run answered cpus %d, want the applied 2", got)
	}
	if got := get(t, tpl.DeepCopy()).Spec.Template.Spec.VirtualMachine.Spec; got.Guest.CPUs != vm.Guest.CPUs || got.Acceleration != vm.Acceleration {
		t.Errorf("a dry run changed the stored template: %+v", got)
	}
	for _, tc := range []struct {
		name string
		u    *unstructured.Unstructured
		opts []client.ApplyOption
	}{
		{"a dry run without the topology controller's annotation", desired(false), []client.ApplyOption{client.DryRunAll}},
		{"an apply with the annotation that is not a dry run", desired(true), nil},
		{"an apply", desired(false), nil},
	} {
		err := apply(tc.u, tc.opts...)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "create a new VirtPodMachineTemplate") {
			t.Errorf("%s: %v, want refused as immutable", tc.name, err)
		}
	}
}
