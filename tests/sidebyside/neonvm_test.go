package sidebyside

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/virtpod/virtpod/tests/kubeapi"
	"github.com/virtpod/virtpod/tests/loopback"
	"github.com/virtpod/virtpod/tests/promscrape"
)

// neonvm is NeonVM's neonvm-controller (github.com/neondatabase/autoscaling, built from the
// source tree in NEONVM_SRC) as its deployment.yaml runs it, with its admission webhooks
// registered, except for the matched workers (--concurrency-limit=8) and no leader election.
type neonvm struct {
	bin, certDir string
	caPEM        []byte
}

const neonWebhookPort = 9443 // controller-runtime's default; neonvm-controller has no flag for it

// newNeonVM builds neonvm-controller, writes its webhook certificate and returns the folder of
// CRDs it needs: NeonVM's and cert-manager's CertificateRequest, which its controller watches.
func newNeonVM(b *testing.B, dir string) (*neonvm, string) {
	src := os.Getenv("NEONVM_SRC")
	if src == "" {
		src = filepath.Join(os.Getenv("HOME"), ".cache", "virtpod", "neonvm", "src")
	}
	if _, err := os.Stat(filepath.Join(src, "neonvm-controller", "cmd", "main.go")); err != nil {
		b.Fatalf("NeonVM's source is not at NEONVM_SRC=%s: check out github.com/neondatabase/autoscaling there (docs/benchmarks.md names the commit measured): %v", src, err)
	}
	n := &neonvm{bin: build(b, src, "./neonvm-controller/cmd", filepath.Join(dir, "neonvm-controller"), "GOFLAGS=-mod=mod")}
	crds := filepath.Join(dir, "neonvm-crds")
	if err := os.MkdirAll(crds, 0o755); err != nil {
		b.Fatal(err)
	}
	bases, _ := filepath.Glob(filepath.Join(src, "neonvm", "config", "crd", "bases", "*.yaml"))
	for _, f := range bases {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(crds, filepath.Base(f)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for name, crd := range map[string]string{"certificaterequests.yaml": certificateRequestCRD, "nads.yaml": networkAttachmentCRD} {
		if err := os.WriteFile(filepath.Join(crds, name), []byte(crd), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	// controller-runtime's webhook server reads $TMPDIR/k8s-webhook-server/serving-certs.
	n.certDir = filepath.Join(dir, "neonvm-tmp")
	certs := filepath.Join(n.certDir, "k8s-webhook-server", "serving-certs")
	if err := os.MkdirAll(certs, 0o755); err != nil {
		b.Fatal(err)
	}
	certPEM, keyPEM, err := selfSigned()
	if err != nil {
		b.Fatal(err)
	}
	n.caPEM = certPEM
	if err := os.WriteFile(filepath.Join(certs, "tls.crt"), certPEM, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(certs, "tls.key"), keyPEM, 0o600); err != nil {
		b.Fatal(err)
	}
	return n, crds
}

func (neonvm) name() string { return "neonvm" }

func (n *neonvm) start(b *testing.B, env *kubeapi.Env, kubeconfig string) (*exec.Cmd, string) {
	for _, o := range append(n.webhooks(), overlayIPAM.DeepCopy()) {
		if err := env.Client.Create(context.Background(), o); err != nil {
			b.Fatal(err)
		}
	}
	addr := loopback.FreeAddr(b)
	cmd := exec.Command(n.bin, "--leader-elect=false", "--metrics-bind-address="+addr, "--health-probe-bind-address=0",
		"--concurrency-limit=8", "--k8s-client-qps=1000", "--k8s-client-burst=2000",
		"--skip-update-validation-for=", "--disable-runner-cgroup", "--default-cpu-scaling-mode=QmpScaling", "--use-virtio-console=true")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "TMPDIR="+n.certDir,
		"VM_RUNNER_IMAGE=localhost/neonvm/runner:bench", "NAD_IPAM_NAME=neonvm-overlay-ipam", "NAD_IPAM_NAMESPACE=default", "NAD_RUNNER_NAME=neonvm-overlay-for-vms", "NAD_RUNNER_NAMESPACE=default")
	var log bytes.Buffer // it logs every reconcile at info; shown only if the run fails
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if b.Failed() {
			// The first errors say why; the rest repeats them.
			var errs []byte
			for _, line := range bytes.Split(log.Bytes(), []byte("\n")) {
				if bytes.Contains(line, []byte(`"level":"error"`)) && len(errs) < 4000 {
					errs = append(append(errs, line...), '\n')
				}
			}
			fmt.Fprintf(os.Stderr, "neonvm-controller's first errors:\n%s\n", errs)
		}
	})
	kubeapi.Eventually(b, "neonvm-controller's metrics", 30*time.Second, func() error { return metricsUp(addr) })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(n.caPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: time.Second}
	kubeapi.Eventually(b, "neonvm-controller's webhook server", 30*time.Second, func() error {
		resp, err := hc.Get(fmt.Sprintf("https://127.0.0.1:%d/", neonWebhookPort))
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	return cmd, addr
}

func (neonvm) vmResource() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "vm.neon.tech", Version: "v1", Resource: "virtualmachines"}
}

// vm is the smallest VM NeonVM's validation accepts with virtpod's sample's size: 1 CPU, one
// 256 MiB memory slot.
func (neonvm) vm(ns string, i int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"namespace": ns, "name": vmName(i)},
		"spec": map[string]any{"guest": map[string]any{
			"cpus":           map[string]any{"min": int64(1), "max": int64(1), "use": int64(1)},
			"memorySlotSize": "256Mi",
			"memorySlots":    map[string]any{"min": int64(1), "max": int64(1), "use": int64(1)},
			"rootDisk":       map[string]any{"image": "localhost/neonvm/guest:test"},
		}},
	}}
}

// podOf: NeonVM's controller has done its part when the VM is Pending with its runner pod named
// (it names the pod before it creates it; the benchmark also waits for the pod).
func (neonvm) podOf(vm *unstructured.Unstructured) (string, bool) {
	pod, _, _ := unstructured.NestedString(vm.Object, "status", "podName")
	phase, _, _ := unstructured.NestedString(vm.Object, "status", "phase")
	return pod, pod != "" && phase == "Pending"
}

// webhooks are NeonVM's config/webhook/manifests.yaml for VirtualMachines, pointed at the
// controller's webhook server on this machine.
func (n *neonvm) webhooks() []*unstructured.Unstructured {
	hook := func(name, path string) map[string]any {
		return map[string]any{
			"name": name, "admissionReviewVersions": []any{"v1"}, "sideEffects": "None", "failurePolicy": "Fail",
			"clientConfig": map[string]any{"url": fmt.Sprintf("https://127.0.0.1:%d%s", neonWebhookPort, path), "caBundle": n.caPEM},
			"rules": []any{map[string]any{"apiGroups": []any{"vm.neon.tech"}, "apiVersions": []any{"v1"},
				"operations": []any{"CREATE", "UPDATE"}, "resources": []any{"virtualmachines"}}},
		}
	}
	return []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
			"metadata": map[string]any{"name": "neonvm-mutating"},
			"webhooks": []any{hook("mvirtualmachine.kb.io", "/mutate-vm-neon-tech-v1-virtualmachine")}}},
		{Object: map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
			"metadata": map[string]any{"name": "neonvm-validating"},
			"webhooks": []any{hook("vvirtualmachine.kb.io", "/validate-vm-neon-tech-v1-virtualmachine")}}},
	}
}

// selfSigned makes a certificate for 127.0.0.1 that is its own CA.
func selfSigned() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "neonvm-webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// certificateRequestCRD is enough of cert-manager's CertificateRequest for neonvm-controller's
// watch of it to start (it makes one only for VMs with spec.tls, which the benchmark's lack).
const certificateRequestCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: certificaterequests.cert-manager.io
spec:
  group: cert-manager.io
  names: {kind: CertificateRequest, listKind: CertificateRequestList, plural: certificaterequests, singular: certificaterequest}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// networkAttachmentCRD is enough of Multus' NetworkAttachmentDefinition for neonvm-controller's
// start, which reads its overlay network's IPAM configuration from one (overlayIPAM, as
// NeonVM's config/network ships it); VMs without spec.extraNetwork never use it.
const networkAttachmentCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: network-attachment-definitions.k8s.cni.cncf.io
spec:
  group: k8s.cni.cncf.io
  names: {kind: NetworkAttachmentDefinition, listKind: NetworkAttachmentDefinitionList, plural: network-attachment-definitions, singular: network-attachment-definition}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

var overlayIPAM = &unstructured.Unstructured{Object: map[string]any{
	"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
	"metadata": map[string]any{"namespace": "default", "name": "neonvm-overlay-ipam"},
	"spec":     map[string]any{"config": `{"ipam": {"network_name": "neonvm", "ipRanges": [{"range": "10.100.0.0/16", "range_start": "10.100.128.0"}]}}`},
}}

func vmName(i int) string { return fmt.Sprintf("vm-%05d", i) }

// metricsUp says whether a process serves its metrics at addr.
func metricsUp(addr string) error {
	_, err := promscrape.Sums(addr)
	return err
}
