package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlplaneservice"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/capimanager"
	"github.com/virtpod/virtpod/tests/prereq"
)

// installClusterAPI installs Cluster API's CRDs, switches the in-cluster controller to the
// release's infrastructure-components.yaml (its --cluster-api and RBAC, as clusterctl installs
// them; with the local cluster's settings) and runs the real
// Cluster API core manager against the cluster for the test.
func installClusterAPI(t *testing.T) {
	t.Helper()
	crds, mgr := os.Getenv("TEST_ASSET_CAPI_CRDS"), os.Getenv("TEST_ASSET_CAPI_MANAGER")
	_, err1 := os.Stat(crds)
	_, err2 := os.Stat(mgr)
	prereq.Need(t, crds != "" && mgr != "" && err1 == nil && err2 == nil,
		"Cluster API's CRDs ($TEST_ASSET_CAPI_CRDS) and core manager ($TEST_ASSET_CAPI_MANAGER) come from `make capi`")
	if out, err := run("apply", "--server-side", "-f", crds); err != nil {
		t.Fatalf("installing Cluster API's CRDs: %v\n%s", err, out)
	}
	if out, err := run("wait", "--for=condition=Established", "crd/clusters.cluster.x-k8s.io", "crd/machines.cluster.x-k8s.io", "--timeout=60s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := installRelease(release, "infrastructure-components.yaml"); err != nil {
		t.Fatal(err)
	}
	if out, err := run("-n", "virtpod-system", "rollout", "status", "deployment/virtpod-controller", "--timeout=180s"); err != nil {
		t.Fatalf("controller with --cluster-api not available: %v\n%s", err, out)
	}
	stop, err := capimanager.Start(mgr, os.Getenv("KUBECONFIG"), filepath.Join(t.TempDir(), "certs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}

// TestClusterAPIMachine: a Cluster API Machine becomes a VM that boots with its bootstrap data as
// a cloud-init seed, behind the cluster's control-plane Service; deleting the Machine stops it.
func TestClusterAPIMachine(t *testing.T) {
	installClusterAPI(t)
	ctx := context.Background()
	ns := namespace(t)
	vc := &infrav1.VirtPodCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e2e"}}
	cl := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e2e"},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "VirtPodCluster", Name: "e2e"}}}
	for _, o := range []client.Object{vc, cl} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "Cluster provisioned by Cluster API", 2*time.Minute, func() error {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(cl), cl); err != nil {
			return err
		}
		if cl.Status.Phase != string(clusterv1.ClusterPhaseProvisioned) || !cl.Spec.ControlPlaneEndpoint.IsValid() {
			return fmt.Errorf("phase %q endpoint %v", cl.Status.Phase, cl.Spec.ControlPlaneEndpoint)
		}
		return nil
	})

	// Cluster API's bootstrap providers end their runcmd by writing the sentinel.
	userData := "#cloud-config\n# virtpod-e2e-machine-" + ns + "\nruncmd:\n- echo success > /run/cluster-api/bootstrap-success.complete\n"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e2e-cp-0-bootstrap"},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"value": []byte(userData), "format": []byte("cloud-config")}}
	vpm := &infrav1.VirtPodMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e2e-cp-0"},
		Spec: infrav1.VirtPodMachineSpec{VirtualMachine: infrav1.VirtualMachineTemplate{Spec: newVM(ns, "template").Spec}}}
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e2e-cp-0",
		Labels: map[string]string{clusterv1.MachineControlPlaneLabel: ""}},
		Spec: clusterv1.MachineSpec{ClusterName: "e2e", Bootstrap: clusterv1.Bootstrap{DataSecretName: &secret.Name},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "VirtPodMachine", Name: "e2e-cp-0"}}}
	for _, o := range []client.Object{secret, vpm, m} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	eventually(t, "the Machine's VirtualMachine", 2*time.Minute, func() error {
		return kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "e2e-cp-0"}, &vmv1.VirtualMachine{})
	})
	vm := waitRunning(t, ns, "e2e-cp-0", 0)
	pod := podspec.PodName(vm.Name)
	want := fmt.Sprintf("VIRTPOD-GUEST-SEED instance-id=%s hostname=%s user-data-sha256=%x", vm.UID, vm.Name, sha256.Sum256([]byte(userData)))
	eventually(t, "the guest sees its bootstrap seed", 2*time.Minute, func() error { return contains(podLogs(ns, pod), want) })

	wantID := "virtpod://" + ns + "/e2e-cp-0"
	eventually(t, "Machine provisioned with providerID and addresses", 2*time.Minute, func() error {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
			return err
		}
		if m.Spec.ProviderID != wantID || !strings.Contains(fmt.Sprint(m.Status.Addresses), vm.Status.PodIP) {
			return fmt.Errorf("providerID %q addresses %v phase %q", m.Spec.ProviderID, m.Status.Addresses, m.Status.Phase)
		}
		return nil
	})
	// The bootstrap's end, read through the guest's agent (no SSH), on the VirtPodMachine.
	eventually(t, "VirtPodMachine BootstrapSucceeded", 2*time.Minute, func() error {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(vpm), vpm); err != nil {
			return err
		}
		c := meta.FindStatusCondition(vpm.Status.Conditions, infrav1.BootstrapSucceededCondition)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != infrav1.ReasonBootstrapSucceeded {
			return fmt.Errorf("BootstrapSucceeded %+v", c)
		}
		return nil
	})

	// The control-plane Service really reaches the control-plane VM: the cluster's endpoint
	// slice controller lists its pod.
	eventually(t, "control-plane Service endpoints", time.Minute, func() error {
		slices_, err := kubeset.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=" + controlplaneservice.Name("e2e")})
		if err != nil {
			return err
		}
		for _, s := range slices_.Items {
			for _, ep := range s.Endpoints {
				if slices.Contains(ep.Addresses, vm.Status.PodIP) {
					return nil
				}
			}
		}
		return fmt.Errorf("pod IP %s not in %d endpoint slices", vm.Status.PodIP, len(slices_.Items))
	})

	if err := kube.Delete(ctx, m); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Machine, VirtPodMachine, VM and runner pod gone", 3*time.Minute, func() error {
		for _, o := range []client.Object{m, vpm, vm, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}}} {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still there (err %v)", o, o.GetName(), err)
			}
		}
		return nil
	})

	// Deleting the Cluster goes through Cluster API while its manager still runs: the
	// VirtPodCluster and, through its owner reference, the control-plane Service go with it.
	if err := kube.Delete(ctx, cl); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Cluster, VirtPodCluster and control-plane Service gone", 2*time.Minute, func() error {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: controlplaneservice.Name("e2e")}}
		for _, o := range []client.Object{cl, vc, svc} {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still there (err %v)", o, o.GetName(), err)
			}
		}
		return nil
	})
}
