package capi

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestClusterClass stamps a Cluster from the shipped ClusterClass "virtpod" (clusterctl's
// topology flavor, which adds clusterclass-virtpod.yaml) through the real Cluster API topology
// controller: it makes the VirtPodCluster (which virtpod fronts with its Service), the kubeadm
// control plane on a VirtPodMachineTemplate and the worker MachineDeployment down to a
// VirtPodMachine, each machine carrying the Cluster's variables. Then a variable changes, and
// the workers roll onto a new VirtPodMachineTemplate with the new memory while the old one is
// left as it was: the rotation the template's immutability must allow.
func TestClusterClass(t *testing.T) {
	bin, config := clusterctlRepo(t)
	ctx := context.Background()
	ns := namespace(t)
	vars := []string{"VIRTPOD_KERNEL_IMAGE=registry.example.com/vm/kernel:6.1", "VIRTPOD_ROOT_DISK_IMAGE=registry.example.com/vm/k8s:1.37",
		"VIRTPOD_ACCELERATION=Emulated", "VIRTPOD_MACHINE_MEMORY=3Gi"}
	// With a ClusterClass, clusterctl asks the management cluster whether it has the class.
	kubeconfig, err := env.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	objs := clusterctlRun(t, bin, vars, "generate", "cluster", "tc", "--kubeconfig", kubeconfig, "--infrastructure", "virtpod:v0.1.0", "--config", config,
		"--flavor", "topology", "--target-namespace", ns, "--kubernetes-version", "v1.37.2",
		"--control-plane-machine-count", "1", "--worker-machine-count", "1")
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if kinds["ClusterClass"] != 1 || kinds["Cluster"] != 1 || kinds["VirtPodMachineTemplate"] != 2 {
		t.Fatalf("the topology flavor rendered %v, want the Cluster and the ClusterClass with its templates", kinds)
	}
	cl := &clusterv1.Cluster{}
	cl.Namespace, cl.Name = ns, "tc"

	// The infrastructure cluster, stamped and provisioned by virtpod.
	eventually(t, "Cluster tc's VirtPodCluster provisioned", func() error {
		c := get(t, cl)
		if c.Spec.InfrastructureRef.Name == "" {
			return fmt.Errorf("no infrastructureRef yet (%s)", condition(c.Status.Conditions, clusterv1.ClusterTopologyReconciledCondition))
		}
		if !ptrTrue(c.Status.Initialization.InfrastructureProvisioned) {
			return fmt.Errorf("infrastructure not provisioned (VirtPodCluster %s)", c.Spec.InfrastructureRef.Name)
		}
		return nil
	})
	// The control plane's machine template and the workers' carry the Cluster's variables.
	var md *clusterv1.MachineDeployment
	eventually(t, "the control plane and the md-0 MachineDeployment stamped", func() error {
		kcp := &unstructured.Unstructured{}
		kcp.SetAPIVersion("controlplane.cluster.x-k8s.io/v1beta2")
		kcp.SetKind("KubeadmControlPlane")
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: get(t, cl).Spec.ControlPlaneRef.Name}, kcp); err != nil {
			return fmt.Errorf("control plane: %w", err)
		}
		name, _, _ := unstructured.NestedString(kcp.Object, "spec", "machineTemplate", "spec", "infrastructureRef", "name")
		if err := machineTemplateHas(ctx, ns, name, "3Gi"); err != nil {
			return fmt.Errorf("control plane: %w", err)
		}
		var err error
		if md, err = machineDeployment(ctx, ns); err != nil {
			return err
		}
		return machineTemplateHas(ctx, ns, md.Spec.Template.Spec.InfrastructureRef.Name, "3Gi")
	})
	// No kubeadm control plane controller runs here: say what it would once the first control
	// plane machine is up, so that Cluster API's MachineSet makes workers (its preflight checks
	// wait for a control plane that is initialized and not provisioning).
	kcp := &unstructured.Unstructured{}
	kcp.SetAPIVersion("controlplane.cluster.x-k8s.io/v1beta2")
	kcp.SetKind("KubeadmControlPlane")
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: get(t, cl).Spec.ControlPlaneRef.Name}, kcp); err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(kcp.Object, true, "status", "initialization", "controlPlaneInitialized")
	_ = unstructured.SetNestedField(kcp.Object, "v1.37.2", "status", "version")
	if err := env.Client.Status().Update(ctx, kcp); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a VirtPodMachine of md-0", func() error {
		var vpms infrav1.VirtPodMachineList
		if err := env.Client.List(ctx, &vpms, client.InNamespace(ns), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md.Name}); err != nil {
			return err
		}
		if len(vpms.Items) != 1 {
			return fmt.Errorf("%d VirtPodMachines of %s", len(vpms.Items), md.Name)
		}
		g := vpms.Items[0].Spec.VirtualMachine.Spec
		if g.Guest.Memory.String() != "3Gi" || g.Acceleration != vmv1.AccelerationEmulated || g.Guest.KernelImage != "registry.example.com/vm/kernel:6.1" {
			return fmt.Errorf("VirtPodMachine %s has %+v", vpms.Items[0].Name, g)
		}
		return nil
	})

	// A variable changes: the workers' template is rotated, never edited.
	old := md.Spec.Template.Spec.InfrastructureRef.Name
	c := get(t, cl)
	for i := range c.Spec.Topology.Variables {
		if c.Spec.Topology.Variables[i].Name == "memory" {
			c.Spec.Topology.Variables[i].Value.Raw = []byte(`"2Gi"`)
		}
	}
	if err := env.Client.Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	kubeapi.Eventually(t, "md-0 rolled onto a new VirtPodMachineTemplate with 2Gi", 2*time.Minute, func() error {
		md, err := machineDeployment(ctx, ns)
		if err != nil {
			return err
		}
		if name := md.Spec.Template.Spec.InfrastructureRef.Name; name == old {
			return fmt.Errorf("still on %s (%s)", old, condition(get(t, cl).Status.Conditions, clusterv1.ClusterTopologyReconciledCondition))
		}
		return machineTemplateHas(ctx, ns, md.Spec.Template.Spec.InfrastructureRef.Name, "2Gi")
	})
	if err := machineTemplateHas(ctx, ns, old, "3Gi"); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("the old template was edited instead of replaced: %v", err)
	}
}

func machineDeployment(ctx context.Context, ns string) (*clusterv1.MachineDeployment, error) {
	var mds clusterv1.MachineDeploymentList
	if err := env.Client.List(ctx, &mds, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterTopologyMachineDeploymentNameLabel: "md-0"}); err != nil {
		return nil, err
	}
	if len(mds.Items) != 1 {
		return nil, fmt.Errorf("%d MachineDeployments md-0", len(mds.Items))
	}
	return &mds.Items[0], nil
}

// machineTemplateHas checks the VirtPodMachineTemplate name has the topology's images,
// acceleration and the given memory.
func machineTemplateHas(ctx context.Context, ns, name, memory string) error {
	tpl := &infrav1.VirtPodMachineTemplate{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tpl); err != nil {
		return err
	}
	g := tpl.Spec.Template.Spec.VirtualMachine.Spec
	if g.Guest.Memory.Cmp(resource.MustParse(memory)) != 0 || g.Acceleration != vmv1.AccelerationEmulated ||
		g.Guest.KernelImage != "registry.example.com/vm/kernel:6.1" || g.Guest.RootDisk.Image != "registry.example.com/vm/k8s:1.37" {
		return fmt.Errorf("VirtPodMachineTemplate %s: memory %s, acceleration %s, kernel %s, disk %s; want %s, Emulated and the variables' images",
			name, g.Guest.Memory.String(), g.Acceleration, g.Guest.KernelImage, g.Guest.RootDisk.Image, memory)
	}
	return nil
}
