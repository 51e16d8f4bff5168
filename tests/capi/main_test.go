// Package capi tests virtpod's Cluster API infrastructure provider against a real kube-apiserver
// with Cluster API's CRDs, the real Cluster API core manager and kubeadm bootstrap provider (built
// by `make capi`), so Clusters and Machines really go through Cluster API's own controllers.
package capi

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	"github.com/virtpod/virtpod/controllers/manager"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/capimanager"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	need := map[string]string{
		"TEST_ASSET_KUBE_APISERVER":          "kube-apiserver (make control-plane)",
		"TEST_ASSET_ETCD":                    "etcd (make control-plane)",
		"TEST_ASSET_CAPI_MANAGER":            "the Cluster API core manager (make capi)",
		"TEST_ASSET_CAPI_CRDS":               "Cluster API's CRDs (make capi)",
		"TEST_ASSET_CAPI_KUBEADM_CRDS":       "the kubeadm control plane's and bootstrap's CRDs (make capi)",
		"TEST_ASSET_CAPI_KUBEADM_BOOTSTRAP":  "the Cluster API kubeadm bootstrap provider (make capi)",
		"TEST_ASSET_KUBE_CONTROLLER_MANAGER": "kube-controller-manager (make k8s-binaries)",
	}
	for v, what := range need {
		if _, err := os.Stat(os.Getenv(v)); os.Getenv(v) == "" || err != nil {
			msg := fmt.Sprintf("%s missing ($%s=%q): run these tests with `make test-capi`", what, v, os.Getenv(v))
			if os.Getenv("CI") == "true" {
				fmt.Fprintln(os.Stderr, "FAIL:", msg)
				return 1
			}
			fmt.Fprintln(os.Stderr, "SKIP:", msg)
			return 0
		}
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	var err error
	if env, err = kubeapi.Start(os.Getenv("TEST_ASSET_CAPI_CRDS"), os.Getenv("TEST_ASSET_CAPI_KUBEADM_CRDS")); err != nil {
		fmt.Fprintln(os.Stderr, "starting the control plane:", err)
		return 1
	}
	defer env.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "virtpod-capi-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	kubeconfig, err := env.Kubeconfig(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The garbage collector: machine deletion waits on the foreground deletion of the VM.
	stopGC, err := capimanager.Run("kube-controller-manager", kubeconfig, os.Getenv("TEST_ASSET_KUBE_CONTROLLER_MANAGER"),
		"--kubeconfig="+kubeconfig, "--controllers=garbagecollector", "--leader-elect=false", "--secure-port=0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting kube-controller-manager:", err)
		return 1
	}
	defer stopGC()
	stop, err := capimanager.Start(os.Getenv("TEST_ASSET_CAPI_MANAGER"), kubeconfig, filepath.Join(dir, "certs"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the Cluster API core manager:", err)
		return 1
	}
	defer stop()
	stopBootstrap, err := capimanager.StartProvider("kubeadm-bootstrap-manager", os.Getenv("TEST_ASSET_CAPI_KUBEADM_BOOTSTRAP"),
		kubeconfig, filepath.Join(dir, "certs-bootstrap"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the kubeadm bootstrap provider:", err)
		return 1
	}
	defer stopBootstrap()
	if err := startVirtpod(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := labelKubeadmKinds(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "labelling the kubeadm CRDs:", err)
		return 1
	}
	if err := installTemplatePolicy(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "the template immutability policy:", err)
		return 1
	}
	return m.Run()
}

// labelKubeadmKinds gives the kubeadm control plane's and bootstrap's CRDs the contract label
// their kustomization adds when Cluster API installs them (the topology controller reads it).
func labelKubeadmKinds(ctx context.Context) error {
	return labelCRDs(ctx, env.Client, `{"cluster.x-k8s.io/v1beta2":"v1beta2"}`, "controlplane.cluster.x-k8s.io", "bootstrap.cluster.x-k8s.io")
}

// labelCRDs merges labels (a JSON object) into the labels of every CRD of the groups given, as
// an installer (kustomize, clusterctl) does.
func labelCRDs(ctx context.Context, c client.Client, labels string, groups ...string) error {
	crds := &unstructured.UnstructuredList{}
	crds.SetAPIVersion("apiextensions.k8s.io/v1")
	crds.SetKind("CustomResourceDefinitionList")
	if err := c.List(ctx, crds); err != nil {
		return err
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":`+labels+`}}`))
	for i := range crds.Items {
		if g, _, _ := unstructured.NestedString(crds.Items[i].Object, "spec", "group"); slices.Contains(groups, g) {
			if err := c.Patch(ctx, &crds.Items[i], patch); err != nil {
				return err
			}
		}
	}
	return nil
}

// installTemplatePolicy creates config/capi/admission's policy as shipped and waits until the
// API server enforces it: a probe template's change, sent as a dry run, is refused.
func installTemplatePolicy(ctx context.Context) error {
	objs, err := kubeapi.ReadObjects("config/capi/admission/template-immutable-policy.yaml")
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	probe := &infrav1.VirtPodMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "policy-probe"},
		Spec: infrav1.VirtPodMachineTemplateSpec{Template: infrav1.VirtPodMachineTemplateResource{
			Spec: infrav1.VirtPodMachineSpec{VirtualMachine: infrav1.VirtualMachineTemplate{Spec: kubeapi.SampleVM("default", "probe").Spec}}}}}
	if err := env.Client.Create(ctx, probe); err != nil {
		return err
	}
	defer func() { _ = env.Client.Delete(ctx, probe) }()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		changed := probe.DeepCopy() // read again: the controller writes its status
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(probe), changed); err != nil {
			return err
		}
		changed.Spec.Template.Spec.VirtualMachine.Spec.Guest.CPUs++
		if err := env.Client.Update(ctx, changed, client.DryRunAll); apierrors.IsInvalid(err) {
			return nil
		}
	}
	return fmt.Errorf("a VirtPodMachineTemplate's change still admitted 30 s after the policy was created")
}

// startVirtpod runs virtpod's controllers with the Cluster API provider, and the default
// ProviderClass the VMs need.
func startVirtpod(ctx context.Context) error {
	qemu := kubeapi.DefaultProviderClass()
	if err := env.Client.Create(ctx, qemu); err != nil {
		return err
	}
	mgr, err := manager.New(env.Config, manager.Options{Pod: podspec.DefaultOptions(), Workers: 2, MetricsAddr: "0", ClusterAPI: true})
	if err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "virtpod manager:", err)
		}
	}()
	return nil
}
