// Package kubeapi starts a real kube-apiserver and etcd (built by `make control-plane`) for
// tests, with virtpod's CRDs installed. Nothing the API server decides is faked.
package kubeapi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

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
	dir    string // etcd's data and the API server's certificates, kept across Restart
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

// Start starts kube-apiserver and etcd with virtpod's CRDs (its Cluster API kinds included), plus
// any extra CRD folders.
func Start(extraCRDs ...string) (*Env, error) {
	// Our own folders: envtest deletes the ones it makes at every stop, which would make a
	// restart lose etcd's data and change the API server's serving certificate.
	dir, err := os.MkdirTemp("", "virtpod-kubeapi-")
	if err != nil {
		return nil, err
	}
	etcdDir, certDir := filepath.Join(dir, "etcd"), filepath.Join(dir, "apiserver")
	for _, d := range []string{etcdDir, certDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
	}
	te := &envtest.Environment{
		CRDDirectoryPaths: append([]string{filepath.Join(Root(), "config", "crd", "bases"),
			filepath.Join(Root(), "config", "capi", "crd", "bases")}, extraCRDs...),
		ErrorIfCRDPathMissing: true,
		// kube-apiserver can take a minute to drain its watches; after this it is SIGKILLed.
		ControlPlaneStopTimeout: 5 * time.Second,
		ControlPlane: envtest.ControlPlane{
			Etcd:      &envtest.Etcd{DataDir: etcdDir},
			APIServer: &envtest.APIServer{CertDir: certDir},
		},
	}
	cfg, err := te.Start()
	if err != nil {
		_ = te.Stop() // a failed CRD install leaves kube-apiserver and etcd running
		_ = os.RemoveAll(dir)
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "kube-apiserver started at %s\n", cfg.Host)
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		_ = te.Stop()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &Env{Config: cfg, Client: c, env: te, dir: dir}, nil
}

// Stop stops the control plane and removes its data.
func (e *Env) Stop() error {
	err := e.env.Stop()
	return errors.Join(err, os.RemoveAll(e.dir))
}

// Restart stops kube-apiserver and etcd, runs down (if not nil) while they are stopped, and
// starts them again with the same data, ports and certificates, as a control-plane upgrade or
// crash would: clients keep their configuration and must reconnect by themselves. An API
// server still draining watches after the stop timeout is killed, as a crash.
func (e *Env) Restart(down func()) error {
	cp := &e.env.ControlPlane
	apiURL, etcdURL := cp.APIServer.SecureServing.URL("https", "").String(), cp.Etcd.URL.String()
	if err := cp.APIServer.Stop(); err != nil && !strings.HasPrefix(err.Error(), "timeout waiting for process") {
		return fmt.Errorf("stopping kube-apiserver: %w", err)
	}
	if err := cp.Etcd.Stop(); err != nil {
		return fmt.Errorf("stopping etcd: %w", err)
	}
	if down != nil {
		down()
	}
	// A restart reads back all that etcd holds, beside whatever else the machine runs (CI: the
	// local cluster's guests): envtest's 20 s for a start ran out there (docs/history.md).
	cp.Etcd.StartTimeout, cp.APIServer.StartTimeout = 2*time.Minute, 2*time.Minute
	if err := cp.Etcd.Start(); err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	if err := cp.APIServer.Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver: %w", err)
	}
	if a, b := cp.APIServer.SecureServing.URL("https", "").String(), cp.Etcd.URL.String(); a != apiURL || b != etcdURL {
		return fmt.Errorf("the control plane moved: kube-apiserver %s → %s, etcd %s → %s", apiURL, a, etcdURL, b)
	}
	return nil
}

func exists(p string) bool {
	if p == "" {
		return false
	}
	_, err := os.Stat(p)
	return err == nil
}

// DefaultProviderClass is the cluster's default class as config/providers ships it: qemu, its
// runner with virtio-fs, with emulation allowed (the tests' guests run under TCG).
func DefaultProviderClass() *vmv1.ProviderClass {
	return &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: "qemu", Annotations: map[string]string{vmv1.AnnotationDefaultClass: "true"}},
		Spec: vmv1.ProviderClassSpec{Handler: vmv1.ProviderQEMU, AllowEmulation: true, RunnerFeatures: []vmv1.RunnerFeature{vmv1.RunnerFeatureVirtioFS}}}
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
