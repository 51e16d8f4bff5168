package capi

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/capimanager"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// hostedTenant makes Cluster name in ns whose control plane is hosted the way Kamaji hosts one:
// a second kube-apiserver (returned, stopped at the test's end) stands for it; the VirtPodCluster
// is annotated managed-by and gets its endpoint by Kamaji's merge patch; the control plane
// object says initialized and externally managed at version v1.37.2; the `<name>-kubeconfig`
// and `<name>-ca` Secrets are what it publishes (a worker's join needs only the CA certificate's
// hash; Cluster API wants a key present, which this test's API server does not hand out).
func hostedTenant(t *testing.T, ns, name string) (tenant *kubeapi.Env, endpoint string) {
	t.Helper()
	ctx := context.Background()
	tenant, err := kubeapi.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })
	path, err := tenant.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var server string
	var caCert []byte
	for _, c := range kc.Clusters {
		server, caCert = c.Server, c.CertificateAuthorityData
	}
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	// The CA's key is unused by a worker's join; this test's API server does not hand it out.
	kamaji := capimanager.Kamaji{Namespace: ns, Name: name, Host: u.Hostname(), Port: int32(port),
		Kubeconfig: kubeconfig, CACert: caCert, CAKey: []byte("unused by a worker's join")}
	if err := kamaji.Wire(ctx, env.Client); err != nil {
		t.Fatal(err)
	}
	cl := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "VirtPodCluster", Name: name},
			ControlPlaneRef:   clusterv1.ContractVersionedObjectReference{APIGroup: testControlPlaneGroup, Kind: "TestControlPlane", Name: name}}}
	if err := env.Client.Create(ctx, cl); err != nil {
		t.Fatal(err)
	}
	return tenant, u.Host
}

// guestKubelets registers, in the tenant, a Ready Node for every VirtPodMachine of ns that
// virtpod provisioned (its guest runs): what each guest's kubelet does after `kubeadm join`,
// with the providerID the templates give it and the guest's InternalIP. It returns how many Nodes of ns's machines exist.
func guestKubelets(ctx context.Context, tenant *kubeapi.Env, ns string) (int, error) {
	var vpms infrav1.VirtPodMachineList
	if err := env.Client.List(ctx, &vpms, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	nodes := 0
	for _, v := range vpms.Items {
		if v.Spec.ProviderID == "" || v.DeletionTimestamp != nil {
			continue
		}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: v.Name}, Spec: corev1.NodeSpec{ProviderID: v.Spec.ProviderID}}
		if err := tenant.Client.Create(ctx, n); apierrors.IsAlreadyExists(err) {
			nodes++
			continue
		} else if err != nil {
			return 0, err
		}
		n.Status = corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
		for _, a := range v.Status.Addresses {
			if a.Type == clusterv1.MachineInternalIP {
				n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a.Address})
			}
		}
		if err := tenant.Client.Status().Update(ctx, n); err != nil {
			return 0, err
		}
		nodes++
	}
	return nodes, nil
}

// TestTenantWorkersScaleHealAndGo runs a MachineDeployment of virtpod workers for a hosted tenant
// through Cluster API's own controllers (core manager and kubeadm bootstrap provider), with
// simulated kubelets on both sides (the management cluster's for the runner pods, the guests'
// for the tenant's Nodes): one worker becomes a Running Machine with its tenant Node; scaled to
// two, a second; a MachineHealthCheck replaces the worker whose Node went NotReady (Cluster API
// replaces the Machine: a new VM, not a restart of the old one); scaled to one, a worker is
// drained and goes with its VM; deleting the Cluster removes every VM, VirtPodMachine and runner
// pod virtpod made.
func TestTenantWorkersScaleHealAndGo(t *testing.T) {
	// Mostly waiting on Cluster API's controllers, in a namespace and tenant of its own: it
	// runs beside the package's other tests of a second API server.
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	tenant, _ := hostedTenant(t, ns, "tw")
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	if err := kubeapi.CreateNode(ctx, env.Client, "node-tw"); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := kubeapi.StartKubelets(kctx, env.Config, ns, "node-tw"); err != nil {
		t.Fatal(err)
	}

	tpl := &infrav1.VirtPodMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tw-md-0"},
		Spec: infrav1.VirtPodMachineTemplateSpec{Template: infrav1.VirtPodMachineTemplateResource{
			Spec: infrav1.VirtPodMachineSpec{VirtualMachine: infrav1.VirtualMachineTemplate{Spec: kubeapi.SampleVM(ns, "worker").Spec}}}}}
	if err := env.Client.Create(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	kct := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"joinConfiguration": map[string]any{"nodeRegistration": map[string]any{"kubeletExtraArgs": []any{map[string]any{
			"name": "provider-id", "value": "virtpod://" + ns + "/{{ ds.meta_data.local_hostname }}"}}}}}}}}}
	kct.SetAPIVersion("bootstrap.cluster.x-k8s.io/v1beta2")
	kct.SetKind("KubeadmConfigTemplate")
	kct.SetNamespace(ns)
	kct.SetName("tw-md-0")
	if err := env.Client.Create(ctx, kct); err != nil {
		t.Fatal(err)
	}
	sel := map[string]string{clusterv1.ClusterNameLabel: "tw", clusterv1.MachineDeploymentNameLabel: "tw-md-0"}
	md := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tw-md-0"},
		Spec: clusterv1.MachineDeploymentSpec{ClusterName: "tw", Replicas: ptr.To[int32](1),
			Selector: metav1.LabelSelector{MatchLabels: sel},
			// What Cluster API's webhook (not installed here) defaults.
			Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{
				Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{
					MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}}},
			Template: clusterv1.MachineTemplateSpec{ObjectMeta: clusterv1.ObjectMeta{Labels: sel},
				Spec: clusterv1.MachineSpec{ClusterName: "tw", Version: "v1.37.2",
					Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfigTemplate", Name: "tw-md-0"}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: infrav1.GroupVersion.Group, Kind: "VirtPodMachineTemplate", Name: "tw-md-0"}}}}}
	if err := env.Client.Create(ctx, md); err != nil {
		t.Fatal(err)
	}

	// running waits until want Machines run with their tenant Nodes, and returns them by name.
	running := func(what string, want int) map[string]bool {
		t.Helper()
		names := map[string]bool{}
		kubeapi.Eventually(t, what, 2*time.Minute, func() error {
			if _, err := guestKubelets(ctx, tenant, ns); err != nil {
				return err
			}
			var ms clusterv1.MachineList
			if err := env.Client.List(ctx, &ms, client.InNamespace(ns), client.MatchingLabels(sel)); err != nil {
				return err
			}
			clear(names)
			for _, m := range ms.Items {
				if m.DeletionTimestamp != nil {
					return fmt.Errorf("Machine %s still being deleted", m.Name)
				}
				if m.Status.Phase != string(clusterv1.MachinePhaseRunning) || !m.Status.NodeRef.IsDefined() {
					return fmt.Errorf("Machine %s: phase %q, nodeRef %+v", m.Name, m.Status.Phase, m.Status.NodeRef)
				}
				names[m.Name] = true
			}
			if len(names) != want {
				return fmt.Errorf("%d Machines running, want %d", len(names), want)
			}
			var vms vmv1.VirtualMachineList
			if err := env.Client.List(ctx, &vms, client.InNamespace(ns)); err != nil {
				return err
			}
			if len(vms.Items) != want {
				return fmt.Errorf("%d VMs, want %d", len(vms.Items), want)
			}
			return nil
		})
		return names
	}
	scale := func(n int32) {
		t.Helper()
		patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n)
		if err := env.Client.Patch(ctx, md, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatal(err)
		}
	}
	first := running("one worker Running with its tenant Node", 1)
	scale(2)
	two := running("two workers Running", 2)

	// A worker's guest stops answering: its Node goes NotReady, and the MachineHealthCheck has
	// Cluster API replace the Machine.
	mhc := &clusterv1.MachineHealthCheck{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tw-md-0"},
		Spec: clusterv1.MachineHealthCheckSpec{ClusterName: "tw", Selector: metav1.LabelSelector{MatchLabels: sel},
			Checks: clusterv1.MachineHealthCheckChecks{UnhealthyNodeConditions: []clusterv1.UnhealthyNodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: ptr.To[int32](1)}}}}}
	if err := env.Client.Create(ctx, mhc); err != nil {
		t.Fatal(err)
	}
	var sick string
	for name := range first {
		sick = name
	}
	node := &corev1.Node{}
	if err := tenant.Client.Get(ctx, client.ObjectKey{Name: sick}, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "NodeStatusUnknown",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Minute))}}
	if err := tenant.Client.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	kubeapi.Eventually(t, "the unhealthy worker's Machine "+sick+" gone", 2*time.Minute, func() error {
		m := &clusterv1.Machine{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: sick}, m); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		return fmt.Errorf("Machine %s: %s", sick, condition(m.Status.Conditions, clusterv1.MachineHealthCheckSucceededCondition))
	})
	healed := running("the unhealthy worker replaced", 2)
	if healed[sick] {
		t.Errorf("Machine %s, whose Node was NotReady, is still there: %v", sick, healed)
	}
	for name := range two {
		if name != sick && !healed[name] {
			t.Errorf("the healthy Machine %s was replaced too: %v", name, healed)
		}
	}

	scale(1)
	running("scaled down to one worker", 1)

	// The Cluster deleted: nothing of virtpod's is left in the namespace.
	if err := env.Client.Delete(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tw"}}); err != nil {
		t.Fatal(err)
	}
	kubeapi.Eventually(t, "the Cluster and everything virtpod made for it gone", 2*time.Minute, func() error {
		for _, l := range []client.ObjectList{&clusterv1.ClusterList{}, &infrav1.VirtPodClusterList{}, &infrav1.VirtPodMachineList{},
			&vmv1.VirtualMachineList{}, &corev1.PodList{}, &corev1.PersistentVolumeClaimList{}} {
			if err := env.Client.List(ctx, l, client.InNamespace(ns)); err != nil {
				return err
			}
			if items, err := meta.ExtractList(l); err != nil || len(items) > 0 {
				return fmt.Errorf("%d %T left (%v)", len(items), l, err)
			}
		}
		return nil
	})
}
