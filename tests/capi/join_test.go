package capi

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// joinToken is a kubeadm bootstrap token as it appears in a join configuration.
var joinToken = regexp.MustCompile(`\b([a-z0-9]{6})\.[a-z0-9]{16}\b`)

// TestWorkerJoinsTenant follows a worker Machine of a tenant cluster whose control plane is
// hosted the way Kamaji hosts one (here a second kube-apiserver; the VirtPodCluster annotated
// managed-by, its endpoint patched in) through Cluster API's own controllers: the real kubeadm
// bootstrap provider writes the worker's `kubeadm join` cloud-config with a bootstrap token it
// made in the tenant, virtpod's VM boots with that Secret by reference, and once a Node
// registers in the tenant with the providerID virtpod set (what the guest's kubelet does with
// the templates' --provider-id), Cluster API matches it: nodeRef, phase Running. Deleting the
// Machine drains and deletes the tenant's Node and removes the VM. No guest boots here: the
// runner pod and the Node are what a kubelet would write (tests/e2e boots real guests).
func TestWorkerJoinsTenant(t *testing.T) {
	// Mostly waiting on Cluster API's controllers, in a namespace and tenant of its own: it
	// runs beside the package's other tests of a second API server.
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)

	tenant, endpoint := hostedTenant(t, ns, "tj")

	// A worker Machine with the kubeadm bootstrap the clusterctl templates use.
	kcfg := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"joinConfiguration": map[string]any{
		"nodeRegistration": map[string]any{"kubeletExtraArgs": []any{map[string]any{
			"name": "provider-id", "value": "virtpod://" + ns + "/{{ ds.meta_data.local_hostname }}"}}}}}}}
	kcfg.SetAPIVersion("bootstrap.cluster.x-k8s.io/v1beta2")
	kcfg.SetKind("KubeadmConfig")
	kcfg.SetNamespace(ns)
	kcfg.SetName("tj-w-0")
	if err := env.Client.Create(ctx, kcfg); err != nil {
		t.Fatal(err)
	}
	m, vpm := newMachine(t, ns, "tj", "tj-w-0", false, clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
		APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfig", Name: "tj-w-0"}})
	// A patch: Cluster API's controllers write the Machine from the moment it exists.
	if err := env.Client.Patch(ctx, m.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"version":"v1.37.2"}}`))); err != nil {
		t.Fatal(err)
	}

	// The bootstrap provider's join, with a token that exists in the tenant.
	var dataSecret string
	eventually(t, "the Machine's bootstrap data", func() error {
		mm := get(t, m.DeepCopy())
		if mm.Spec.Bootstrap.DataSecretName == nil {
			return fmt.Errorf("no dataSecretName (%s)", condition(mm.Status.Conditions, clusterv1.MachineBootstrapConfigReadyCondition))
		}
		dataSecret = *mm.Spec.Bootstrap.DataSecretName
		return nil
	})
	data := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dataSecret}}).Data["value"]
	token := joinToken.FindSubmatch(data)
	if !regexp.MustCompile(`kubeadm join`).Match(data) || token == nil ||
		!regexp.MustCompile(regexp.QuoteMeta(endpoint)).Match(data) || !regexp.MustCompile(`virtpod://`+ns+`/`).Match(data) {
		t.Fatalf("bootstrap data without a kubeadm join to %s, a token and the providerID:\n%s", endpoint, data)
	}
	if err := tenant.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "bootstrap-token-" + string(token[1])}, &corev1.Secret{}); err != nil {
		t.Fatalf("the join's token %s in the tenant: %v", token[1], err)
	}
	vm := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vpm.Name}}
	eventually(t, "the worker's VM, with the join by reference", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			return err
		}
		if ci := vm.Spec.Guest.CloudInit; ci == nil || ci.SecretRef.Name != dataSecret {
			return fmt.Errorf("cloudInit %+v, want Secret %s", ci, dataSecret)
		}
		return nil
	})

	// The guest runs (a runner pod as a kubelet would report it) and its kubelet registers.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: podspec.PodName(vm.Name)}}
	eventually(t, "runner pod", func() error { return env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod) })
	if err := kubeapi.CreateNode(ctx, env.Client, "node-a"); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	env.Bind(t, pod, "node-a")
	env.Kubelet(t, pod, kubeapi.RunnerRunning("10.244.7.7"))
	providerID := "virtpod://" + ns + "/" + vm.Name
	eventually(t, "VirtPodMachine provisioned", func() error {
		if v := get(t, vpm); v.Spec.ProviderID != providerID {
			return fmt.Errorf("providerID %q, want %q", v.Spec.ProviderID, providerID)
		}
		return nil
	})
	if n, err := guestKubelets(ctx, tenant, ns); err != nil || n != 1 {
		t.Fatalf("the guest's kubelet registered %d Nodes (%v), want 1", n, err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: vm.Name}}
	eventually(t, "Machine Running with the tenant's Node", func() error {
		mm := get(t, m.DeepCopy())
		if mm.Status.NodeRef.Name != vm.Name || mm.Status.Phase != string(clusterv1.MachinePhaseRunning) {
			return fmt.Errorf("nodeRef %+v, phase %q (%s)", mm.Status.NodeRef, mm.Status.Phase, condition(mm.Status.Conditions, clusterv1.MachineNodeHealthyCondition))
		}
		if !meta.IsStatusConditionTrue(mm.Status.Conditions, clusterv1.MachineNodeReadyCondition) {
			return fmt.Errorf("%s", condition(mm.Status.Conditions, clusterv1.MachineNodeReadyCondition))
		}
		return nil
	})

	// Scale down: Cluster API drains the tenant's Node, removes the VM, then the Node.
	if err := env.Client.Delete(ctx, get(t, m.DeepCopy())); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the tenant's Node cordoned and the runner pod terminating", func() error {
		n := &corev1.Node{}
		if err := tenant.Client.Get(ctx, client.ObjectKeyFromObject(node), n); err != nil {
			return err
		}
		if !n.Spec.Unschedulable {
			return fmt.Errorf("Node %s not cordoned", n.Name)
		}
		if p := get(t, pod.DeepCopy()); p.DeletionTimestamp == nil {
			return fmt.Errorf("runner pod not being deleted")
		}
		return nil
	})
	if err := env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
		t.Fatal(err) // no kubelet: confirm the pod's end as it would once the guest stopped
	}
	eventually(t, "VM, VirtPodMachine, Machine and the tenant's Node gone", func() error {
		for _, o := range []client.Object{vm.DeepCopy(), vpm.DeepCopy(), m.DeepCopy()} {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still there (err %v)", o, o.GetName(), err)
			}
		}
		if err := tenant.Client.Get(ctx, client.ObjectKeyFromObject(node), &corev1.Node{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the tenant's Node %s still there (err %v)", node.Name, err)
		}
		return nil
	})
}
