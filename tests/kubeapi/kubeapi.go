// Package kubeapi starts a real kube-apiserver and etcd (built by `make control-plane`) for
// tests, with virtpod's CRDs installed. Nothing the API server decides is faked.
package kubeapi

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/manager"
)

// Env is a running control plane.
type Env struct {
	Config *rest.Config
	Client client.Client
	env    *envtest.Environment
}

// Root is the repository's top folder.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Main starts the control plane around a package's tests and stops it after them. Without the
// binaries the tests are skipped, except under CI=true, where that is a failure.
func Main(m interface{ Run() int }, env **Env) {
	apiserver, etcd := os.Getenv("TEST_ASSET_KUBE_APISERVER"), os.Getenv("TEST_ASSET_ETCD")
	if !exists(apiserver) || !exists(etcd) {
		msg := fmt.Sprintf("kube-apiserver (%q) or etcd (%q) missing: run these tests with `make test-controller`, which builds them", apiserver, etcd)
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL:", msg)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "SKIP:", msg)
		os.Exit(0)
	}
	e, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the control plane:", err)
		os.Exit(1)
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
	}
	os.Exit(code)
}

// Start starts kube-apiserver and etcd with virtpod's CRDs, plus any extra CRD folders.
func Start(extraCRDs ...string) (*Env, error) {
	te := &envtest.Environment{
		CRDDirectoryPaths:     append([]string{filepath.Join(Root(), "config", "crd", "bases")}, extraCRDs...),
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := te.Start()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "kube-apiserver started at %s\n", cfg.Host)
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		_ = te.Stop()
		return nil, err
	}
	return &Env{Config: cfg, Client: c, env: te}, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error { return e.env.Stop() }

func exists(p string) bool {
	if p == "" {
		return false
	}
	_, err := os.Stat(p)
	return err == nil
}

// SampleVM is a small valid VirtualMachine for tests.
func SampleVM(namespace, name string) *vmv1.VirtualMachine {
	return &vmv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: vmv1.VirtualMachineSpec{
			Acceleration: vmv1.AccelerationEmulated,
			Guest: vmv1.GuestSpec{
				CPUs:        1,
				Memory:      resource.MustParse("256Mi"),
				KernelImage: "localhost/virtpod/guest:test",
				RootDisk:    vmv1.RootDisk{Image: "localhost/virtpod/guest:test"},
			},
		},
	}
}

// Kubeconfig writes a cluster-admin kubeconfig for this control plane into dir, for running
// virtpod's binaries as separate processes against it.
func (e *Env) Kubeconfig(dir string) (string, error) {
	u, err := e.env.AddUser(envtest.User{Name: "virtpod-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	b, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, b, 0o600)
}
