// Package capimanager runs the Cluster API core manager (and other controller binaries) as
// processes against a test's API server, as the Cluster API tests and the end-to-end tests need,
// and lays out what a control plane provider (a test kind, Kamaji's wiring) leaves for them.
package capimanager

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Start runs the Cluster API core manager bin against the cluster of kubeconfig. Its webhooks are
// not registered with the API server (they would need the whole kustomize deployment), but the
// webhook server must start, so it gets a self-signed certificate in certDir.
func Start(bin, kubeconfig, certDir string) (func(), error) {
	// ClusterClass and managed topologies, still behind a gate in v1.14.
	return StartProvider("cluster-api-manager", bin, kubeconfig, certDir, "--feature-gates=ClusterTopology=true")
}

// StartProvider runs one of Cluster API's managers (the core's, the kubeadm bootstrap
// provider's) as name, the way Start does, with extra flags.
func StartProvider(name, bin, kubeconfig, certDir string, extra ...string) (func(), error) {
	if err := selfSignedCert(certDir); err != nil {
		return nil, err
	}
	webhook, health := freePort(), freePort()
	return Run(name, kubeconfig, bin, append([]string{
		"--leader-elect=false", "--diagnostics-address=0",
		"--webhook-cert-dir=" + certDir, "--webhook-port=" + strconv.Itoa(webhook),
		"--health-addr=127.0.0.1:" + strconv.Itoa(health), "--v=2"}, extra...)...)
}

// LogPath is where Run writes the output of the binary it runs as name.
func LogPath(name string) string { return filepath.Join(os.TempDir(), "virtpod-"+name+".log") }

// Run runs a controller binary against the cluster of kubeconfig, logging to LogPath(name), and
// returns how to stop it. A binary that exits within two seconds is an error; one still running
// when the test binary dies (a panic) is killed with it.
func Run(name, kubeconfig, bin string, args ...string) (func(), error) {
	log, err := os.Create(LogPath(name))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "%s started (pid %d, log %s)\n", name, cmd.Process.Pid, log.Name())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
		return nil, fmt.Errorf("%s exited at once; see %s", name, log.Name())
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
