// Package capi tests virtpod's Cluster API infrastructure provider against a real kube-apiserver
// with Cluster API's CRDs and the real Cluster API core manager (built by `make capi`), so
// Clusters and Machines really go through Cluster API's own controllers.
package capi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/manager"
	"github.com/virtpod/virtpod/pkg/podspec"
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
	if env, err = kubeapi.Start(os.Getenv("TEST_ASSET_CAPI_CRDS")); err != nil {
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
	stopGC, err := start("kube-controller-manager", kubeconfig, os.Getenv("TEST_ASSET_KUBE_CONTROLLER_MANAGER"),
		"--kubeconfig="+kubeconfig, "--controllers=garbagecollector", "--leader-elect=false", "--secure-port=0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting kube-controller-manager:", err)
		return 1
	}
	defer stopGC()
	stop, err := startClusterAPI(dir, kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the Cluster API core manager:", err)
		return 1
	}
	defer stop()
	if err := startVirtpod(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// startVirtpod runs virtpod's controllers with the Cluster API provider, and the default
// ProviderClass the VMs need.
func startVirtpod(ctx context.Context) error {
	qemu := &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: "qemu", Annotations: map[string]string{vmv1.AnnotationDefaultClass: "true"}},
		Spec: vmv1.ProviderClassSpec{Handler: vmv1.ProviderQEMU, AllowEmulation: true}}
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

// startClusterAPI runs the Cluster API core manager as its own process against the test's API
// server. Its webhooks are not registered with the API server (they would need the whole
// kustomize deployment), but the webhook server must start, so it gets a self-signed certificate.
func startClusterAPI(dir, kubeconfig string) (func(), error) {
	certs := filepath.Join(dir, "certs")
	if err := selfSignedCert(certs); err != nil {
		return nil, err
	}
	webhook, health := freePort(), freePort()
	return start("cluster-api-manager", kubeconfig, os.Getenv("TEST_ASSET_CAPI_MANAGER"),
		"--leader-elect=false", "--diagnostics-address=0",
		"--webhook-cert-dir="+certs, "--webhook-port="+strconv.Itoa(webhook),
		"--health-addr=127.0.0.1:"+strconv.Itoa(health), "--v=2")
}

// start runs a controller binary against the test's API server, logging to a file in $TMPDIR.
func start(name, kubeconfig, bin string, args ...string) (func(), error) {
	log, err := os.Create(filepath.Join(os.TempDir(), "virtpod-capi-"+name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "%s started (pid %d, log %s)\n", name, cmd.Process.Pid, log.Name())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
		return nil, fmt.Errorf("exited at once; see %s", log.Name())
	case <-time.After(2 * time.Second):
	}
	return func() { _ = cmd.Process.Kill(); <-done; log.Close() }, nil
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// selfSignedCert writes tls.crt and tls.key for localhost into dir.
func selfSignedCert(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
}
