package capi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/clusterapi/controlplaneservice"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// bootstrapData is what a bootstrap provider would write; it must never leave its Secret.
const bootstrapData = "#cloud-config\nwrite_files: [{path: /etc/virtpod-token, content: s3cr3t-join-token-7f1c}]\n"

func bootstrapSecret(t *testing.T, ns, name string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"value": []byte(bootstrapData), "format": []byte("cloud-config")}}
	if err := env.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// newMachine creates a VirtPodMachine and the Machine that references it.
func newMachine(t *testing.T, ns, cluster, name string, controlPlane bool, bootstrap clusterv1.Bootstrap) (*clusterv1.Machine, *infrav1.VirtPodMachine) {
	t.Helper()
	ctx := context.Background()
	vpm := &infrav1.VirtPodMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: infrav1.VirtPodMachineSpec{VirtualMachine: infrav1.VirtualMachineTemplate{
			ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"pool": "workers"}},
			Spec:       kubeapi.SampleVM(ns, name).Spec}}}
	if err := env.Client.Create(ctx, vpm); err != nil {
		t.Fatal(err)
	}
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.MachineSpec{ClusterName: cluster,
			Bootstrap: bootstrap,
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "VirtPodMachine", Name: name}}}
	if controlPlane {
		m.Labels = map[string]string{clusterv1.MachineControlPlaneLabel: ""}
	}
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	return m, vpm
}

func TestMachineLifecycle(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	cl, vc := newCluster(t, ns, "gamma", nil, nil)
	var ep clusterv1.APIEndpoint
	eventually(t, "endpoint", func() error {
		if ep = get(t, vc).Spec.ControlPlaneEndpoint; !ep.IsValid() {
			return fmt.Errorf("no endpoint yet")
		}
		return nil
	})
	provisionedCluster(t, cl, ep)

	bootstrapSecret(t, ns, "gamma-cp-0-bootstrap")
	secret := "gamma-cp-0-bootstrap"
	m, vpm := newMachine(t, ns, cl.Name, "gamma-cp-0", true, clusterv1.Bootstrap{DataSecretName: &secret})
	vm := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vpm.Name}}
	eventually(t, "VirtualMachine created", func() error { return env.Client.Get(ctx, client.ObjectKeyFromObject(vm), vm) })
	if ci := vm.Spec.Guest.CloudInit; ci == nil || ci.SecretRef.Name != "gamma-cp-0-bootstrap" || ci.UserDataKey != "value" {
		t.Fatalf("VM cloudInit %+v, want the bootstrap Secret by reference", ci)
	}
	raw, _ := json.Marshal(vm)
	if strings.Contains(string(raw), "s3cr3t") {
		t.Fatalf("bootstrap data leaked into the VM: %s", raw)
	}
	if vm.Labels[infrav1.ClusterNameLabel] != "gamma" || vm.Labels["pool"] != "workers" {
		t.Errorf("VM labels %v: want the cluster name and the template's labels", vm.Labels)
	}
	if _, ok := vm.Labels[infrav1.ControlPlaneLabel]; !ok {
		t.Errorf("control-plane machine's VM lacks %s: %v", infrav1.ControlPlaneLabel, vm.Labels)
	}
	if !metav1.IsControlledBy(vm, get(t, vpm)) {
		t.Errorf("VM owners %v: want the VirtPodMachine", vm.OwnerReferences)
	}

	// The runner pod: selected by the control-plane Service, free of the bootstrap data.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: podspec.PodName(vm.Name)}}
	eventually(t, "runner pod", func() error { return env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod) })
	svc := get(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: controlplaneservice.Name(vc.Name)}})
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
		t.Errorf("Service selector %v does not select the control-plane pod (labels %v)", svc.Spec.Selector, pod.Labels)
	}
	if raw, _ := json.Marshal(pod.Spec); strings.Contains(string(raw), "s3cr3t") {
		t.Fatalf("bootstrap data leaked into the pod spec: %s", raw)
	}

	// The guest runs: provisioned, with providerID and addresses, which Cluster API copies.
	// A Ready node to run on: the VM controller reports a pod on a missing node as lost.
	if err := kubeapi.CreateNode(ctx, env.Client, "node-a"); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	env.Bind(t, pod, "node-a")
	env.Kubelet(t, pod, kubeapi.RunnerRunning("10.244.3.9"))
	wantID := "virtpod://" + ns + "/gamma-cp-0"
	eventually(t, "VirtPodMachine provisioned", func() error {
		v := get(t, vpm)
		if v.Spec.ProviderID != wantID {
			return fmt.Errorf("providerID %q, want %q", v.Spec.ProviderID, wantID)
		}
		if v.Status.Initialization.Provisioned == nil || !*v.Status.Initialization.Provisioned {
			return fmt.Errorf("%s", condition(v.Status.Conditions, infrav1.ReadyCondition))
		}
		return nil
	})
	eventually(t, "Machine provisioned by Cluster API", func() error {
		mm := get(t, m.DeepCopy())
		if mm.Spec.ProviderID != wantID {
			return fmt.Errorf("Machine providerID %q", mm.Spec.ProviderID)
		}
		if got := fmt.Sprint(mm.Status.Addresses); !strings.Contains(got, "10.244.3.9") || !strings.Contains(got, "gamma-cp-0") {
			return fmt.Errorf("Machine addresses %s", got)
		}
		if mm.Status.Phase != string(clusterv1.MachinePhaseProvisioned) {
			return fmt.Errorf("Machine phase %q", mm.Status.Phase)
		}
		return nil
	})

	// Deleting the Machine deletes the VM; the VirtPodMachine goes once the runner pod is gone.
	if err := env.Client.Delete(ctx, get(t, m.DeepCopy())); err != nil {
		t.Fatal(err)
	}
	eventually(t, "runner pod terminating", func() error {
		p := get(t, pod.DeepCopy())
		if p.DeletionTimestamp == nil {
			return fmt.Errorf("pod not being deleted")
		}
		return nil
	})
	if err := get(t, vpm.DeepCopy()); err.DeletionTimestamp == nil {
		t.Fatal("VirtPodMachine not being deleted while its VM stops")
	}
	// No kubelet here: confirm the pod's end as the kubelet would once the guest stopped.
	if err := env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	eventually(t, "VM, VirtPodMachine and Machine gone", func() error {
		for _, o := range []client.Object{vm.DeepCopy(), vpm.DeepCopy(), m.DeepCopy()} {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still there (err %v)", o, o.GetName(), err)
			}
		}
		return nil
	})
}

func TestMachineWaitsForClusterInfrastructure(t *testing.T) {
	ns := namespace(t)
	// Managed by Kamaji, which has not set the endpoint: the infrastructure is not provisioned.
	cl, _ := newCluster(t, ns, "delta", map[string]string{infrav1.ManagedByAnnotation: "kamaji"}, nil)
	bootstrapSecret(t, ns, "delta-md-0-bootstrap")
	name := "delta-md-0-bootstrap"
	_, vpm := newMachine(t, ns, cl.Name, "delta-md-0", false, clusterv1.Bootstrap{DataSecretName: &name})
	eventually(t, "waiting for the cluster", func() error {
		v := get(t, vpm)
		if c := meta.FindStatusCondition(v.Status.Conditions, infrav1.ReadyCondition); c == nil || c.Reason != "WaitingForClusterInfrastructure" {
			return fmt.Errorf("%s", condition(v.Status.Conditions, infrav1.ReadyCondition))
		}
		return nil
	})
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: vpm.Name}, &vmv1.VirtualMachine{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("VM created before the cluster's infrastructure was provisioned (err %v)", err)
	}
	if vm := get(t, vpm); vm.Spec.ProviderID != "" {
		t.Fatalf("providerID %q set before a VM exists", vm.Spec.ProviderID)
	}
}

func TestMachineWaitsForBootstrapData(t *testing.T) {
	ns := namespace(t)
	cl, vc := newCluster(t, ns, "epsilon", nil, nil)
	eventually(t, "cluster provisioned", func() error {
		if !get(t, vc).Status.Ready {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	// A bootstrap config that has not produced its Secret yet (here: one that never will).
	_, vpm := newMachine(t, ns, cl.Name, "epsilon-md-0", false, clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
		APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfig", Name: "epsilon-md-0"}})
	eventually(t, "waiting for bootstrap data", func() error {
		v := get(t, vpm)
		if c := meta.FindStatusCondition(v.Status.Conditions, infrav1.ReadyCondition); c == nil || c.Reason != "WaitingForBootstrapData" {
			return fmt.Errorf("%s", condition(v.Status.Conditions, infrav1.ReadyCondition))
		}
		return nil
	})
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: vpm.Name}, &vmv1.VirtualMachine{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("VM created without bootstrap data (err %v)", err)
	}
}

func TestPausedMachineIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	cl, vc := newCluster(t, ns, "zeta", nil, nil)
	eventually(t, "cluster provisioned", func() error {
		if !get(t, vc).Status.Ready {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	bootstrapSecret(t, ns, "zeta-md-0-bootstrap")
	name := "zeta-md-0-bootstrap"
	vpm := &infrav1.VirtPodMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "zeta-md-0",
		Annotations: map[string]string{infrav1.PausedAnnotation: ""}},
		Spec: infrav1.VirtPodMachineSpec{VirtualMachine: infrav1.VirtualMachineTemplate{Spec: kubeapi.SampleVM(ns, "zeta-md-0").Spec}}}
	if err := env.Client.Create(ctx, vpm); err != nil {
		t.Fatal(err)
	}
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "zeta-md-0"},
		Spec: clusterv1.MachineSpec{ClusterName: cl.Name, Bootstrap: clusterv1.Bootstrap{DataSecretName: &name},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "VirtPodMachine", Name: vpm.Name}}}
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Paused condition", func() error {
		v := get(t, vpm)
		if !strings.Contains(condition(v.Status.Conditions, infrav1.PausedCondition), "Paused=True") || len(v.OwnerReferences) == 0 {
			return fmt.Errorf("%s, owners %v", condition(v.Status.Conditions, infrav1.PausedCondition), v.OwnerReferences)
		}
		return nil
	})
	vm := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vpm.Name}}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vm), vm); !apierrors.IsNotFound(err) {
		t.Fatalf("a paused machine got a VM (err %v)", err)
	}
	eventually(t, "unpaused", func() error {
		v := get(t, vpm.DeepCopy())
		delete(v.Annotations, infrav1.PausedAnnotation)
		return env.Client.Update(ctx, v)
	})
	eventually(t, "VM after unpausing", func() error { return env.Client.Get(ctx, client.ObjectKeyFromObject(vm), vm) })
}
