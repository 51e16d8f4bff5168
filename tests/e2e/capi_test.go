package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/virtpod/virtpod/tests/capimanager"
	"github.com/virtpod/virtpod/tests/prereq"
)

// installClusterAPI installs Cluster API's CRDs, switches the in-cluster controller to the
// release's infrastructure-components.yaml (its --cluster-api and RBAC, as clusterctl installs
// them; with the local cluster's settings) and runs the real
// Cluster API core manager against the cluster for the test.
func installClusterAPI(t *testing.T) {
	t.Helper()
	mgr := applyProvider(t, "Cluster API's core", "TEST_ASSET_CAPI_CRDS", "TEST_ASSET_CAPI_MANAGER",
		"crd/clusters.cluster.x-k8s.io", "crd/machines.cluster.x-k8s.io")
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

// installKubeadmBootstrap installs the kubeadm bootstrap provider's CRDs (labelled with the
// contract version, as its installer does) and runs Cluster API's kubeadm bootstrap manager
// against the cluster for the test.
func installKubeadmBootstrap(t *testing.T) {
	t.Helper()
	kinds := []string{"crd/kubeadmconfigs.bootstrap.cluster.x-k8s.io", "crd/kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io"}
	mgr := applyProvider(t, "the kubeadm bootstrap provider", "TEST_ASSET_CAPI_KUBEADM_CRDS", "TEST_ASSET_CAPI_KUBEADM_BOOTSTRAP", kinds...)
	if out, err := run(append([]string{"label", "--overwrite"}, append(kinds, "cluster.x-k8s.io/v1beta2=v1beta2")...)...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	stop, err := capimanager.StartProvider("kubeadm-bootstrap-manager", mgr, os.Getenv("KUBECONFIG"), filepath.Join(t.TempDir(), "certs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}

// applyProvider applies the CRDs of one of Cluster API's providers, which `make capi` fetched
// with its manager into the paths in the environment variables crdsVar and mgrVar, waits until
// kinds are established, and returns the manager's path.
func applyProvider(t *testing.T, what, crdsVar, mgrVar string, kinds ...string) string {
	t.Helper()
	crds, mgr := os.Getenv(crdsVar), os.Getenv(mgrVar)
	_, err1 := os.Stat(crds)
	_, err2 := os.Stat(mgr)
	prereq.Need(t, crds != "" && mgr != "" && err1 == nil && err2 == nil,
		what+"'s CRDs ($"+crdsVar+") and manager ($"+mgrVar+") come from `make capi`")
	if out, err := run("apply", "--server-side", "-f", crds); err != nil {
		t.Fatalf("installing %s's CRDs: %v\n%s", what, err, out)
	}
	if out, err := run(append([]string{"wait", "--for=condition=Established", "--timeout=60s"}, kinds...)...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return mgr
}
