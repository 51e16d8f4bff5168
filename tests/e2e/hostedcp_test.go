package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/virtpod/virtpod/controllers/manager"
	"github.com/virtpod/virtpod/tests/capimanager"
	"github.com/virtpod/virtpod/tests/prereq"
)

// A tenant's control plane hosted the way Kamaji hosts one (docs/kamaji.md), since Kamaji itself
// is not served here: etcd, kube-apiserver, kube-controller-manager and kube-scheduler as one
// pod of a Deployment in the management cluster behind a ClusterIP Service, its certificates and
// kubeconfigs made by kubeadm's own phases, and kubeadm's join prerequisites uploaded the way
// Kamaji's kubeadm phases upload them.

const (
	tenantCPImage = "localhost/virtpod/tenant-control-plane:v1.37.2"
	// tenantServiceCIDR is the tenant's own Service range: only its API server uses it.
	tenantServiceCIDR = "10.112.0.0/16"
	// tenantPodCIDR is the node image's CNI bridge range (tools/dev/debianguest/nodefiles).
	tenantPodCIDR = "10.85.0.0/16"
)

// hostedControlPlane is a running tenant control plane: its endpoint (the Service's ClusterIP and
// port, what Kamaji patches onto the VirtPodCluster), a client of the tenant as cluster admin, and
// the admin kubeconfig Cluster API gets in the <cluster>-kubeconfig Secret.
type hostedControlPlane struct {
	host       string
	port       int32
	kubeconfig []byte
	tenant     client.Client
}

// hostControlPlane runs a tenant control plane named name in ns and wires it to Cluster API as
// Kamaji does: the <name>-kubeconfig and <name>-ca Secrets, a control plane that says it is
// initialized and externally managed, and the VirtPodCluster annotated managed-by with the
// endpoint patched in by Kamaji's merge patch. The test applies the Cluster.
func hostControlPlane(t *testing.T, ns, name string) *hostedControlPlane {
	t.Helper()
	ctx := context.Background()
	kubeadm := os.Getenv("TEST_ASSET_KUBEADM")
	_, err := os.Stat(kubeadm)
	prereq.Need(t, kubeadm != "" && err == nil, "kubeadm ($TEST_ASSET_KUBEADM) comes from `make k8s-binaries`")

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-api"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name + "-api"},
			Ports: []corev1.ServicePort{{Name: "https", Port: 6443, TargetPort: intstr.FromInt32(6443)}}}}
	mustCreate(t, svc)
	cp := &hostedControlPlane{host: svc.Spec.ClusterIP, port: 6443}

	// kubeadm's phases make the PKI and kubeconfigs for that endpoint.
	dir := t.TempDir()
	endpoint := fmt.Sprintf("%s:%d", cp.host, cp.port)
	// Two copies of one configuration: the one uploaded to the tenant names the certificates
	// where kubeadm join puts them in the guest (the kubelet reads its client CA there); the
	// other has kubeadm make them here.
	config := func(certDir string) string {
		return fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint: {advertiseAddress: %[1]s, bindPort: 6443}
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: %[2]s
kubernetesVersion: v1.37.2
controlPlaneEndpoint: %[3]s
certificatesDir: %[4]s
networking: {serviceSubnet: %[5]s, podSubnet: %[6]s}
apiServer:
  certSANs: [%[1]s, 127.0.0.1, %[7]s]
`, cp.host, name, endpoint, certDir, tenantServiceCIDR, tenantPodCIDR, svc.Name+"."+ns+".svc")
	}
	cfg, uploaded := filepath.Join(dir, "kubeadm.yaml"), filepath.Join(dir, "kubeadm-uploaded.yaml")
	writeFile(t, cfg, config(filepath.Join(dir, "pki")))
	writeFile(t, uploaded, config("/etc/kubernetes/pki"))
	kc := filepath.Join(dir, "kubeconfig")
	kubeadmPhase(t, kubeadm, "certs", "all", "--config", cfg)
	for _, conf := range []string{"super-admin", "controller-manager", "scheduler"} {
		kubeadmPhase(t, kubeadm, "kubeconfig", conf, "--config", cfg, "--kubeconfig-dir", kc)
	}
	pki := map[string][]byte{}
	for _, f := range []string{"ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "apiserver-kubelet-client.crt", "apiserver-kubelet-client.key",
		"front-proxy-ca.crt", "front-proxy-client.crt", "front-proxy-client.key", "sa.key", "sa.pub"} {
		pki[f] = readFile(t, filepath.Join(dir, "pki", f))
	}
	// The controllers in the pod reach their API server on localhost, not through its Service.
	local := map[string][]byte{}
	for _, f := range []string{"controller-manager.conf", "scheduler.conf"} {
		local[f] = []byte(strings.ReplaceAll(string(readFile(t, filepath.Join(kc, f))), "https://"+endpoint, "https://127.0.0.1:6443"))
	}
	cp.kubeconfig = readFile(t, filepath.Join(kc, "super-admin.conf"))
	mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-pki"}, Data: pki})
	mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-kubeconfigs"}, Data: local})
	mustCreate(t, controlPlaneDeployment(ns, name, svc.Name))

	rest, err := clientcmd.RESTConfigFromKubeConfig(cp.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cp.tenant, err = client.New(rest, client.Options{Scheme: manager.Scheme()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the tenant's API server answers through its Service", 4*time.Minute, func() error {
		return cp.tenant.List(ctx, &corev1.NamespaceList{})
	})

	// What Kamaji's kubeadm phases do once the API server is up: the kubeadm and kubelet
	// configurations, bootstrap tokens (cluster-info and its RBAC) and the addons.
	admin := filepath.Join(kc, "super-admin.conf")
	for _, phase := range [][]string{{"upload-config", "kubeadm"}, {"upload-config", "kubelet"}, {"bootstrap-token"}, {"addon", "coredns"}, {"addon", "kube-proxy"}} {
		kubeadmPhase(t, kubeadm, append(phase, "--config", uploaded, "--kubeconfig", admin)...)
	}

	// Cluster API's side, as Kamaji's control plane provider leaves it.
	kamaji := capimanager.Kamaji{Namespace: ns, Name: name, Host: cp.host, Port: cp.port,
		Kubeconfig: cp.kubeconfig, CACert: pki["ca.crt"], CAKey: pki["ca.key"]}
	if err := kamaji.Wire(ctx, kube); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = run("delete", "crd", "testcontrolplanes."+capimanager.TestControlPlaneGroup, "--wait=false")
	})
	return cp
}

// controlPlaneDeployment is the tenant control plane's pod, Pod Security restricted like every
// pod of the tests' namespaces: four containers of one image, state in an emptyDir.
func controlPlaneDeployment(ns, name, service string) *appsv1.Deployment {
	const pki, kc = "/etc/kubernetes/pki/", "/etc/kubernetes/kubeconfig/"
	apiserver := []string{"/usr/local/bin/kube-apiserver", "--etcd-servers=http://127.0.0.1:2379", "--secure-port=6443",
		"--service-cluster-ip-range=" + tenantServiceCIDR, "--client-ca-file=" + pki + "ca.crt",
		"--tls-cert-file=" + pki + "apiserver.crt", "--tls-private-key-file=" + pki + "apiserver.key",
		"--kubelet-client-certificate=" + pki + "apiserver-kubelet-client.crt", "--kubelet-client-key=" + pki + "apiserver-kubelet-client.key",
		"--kubelet-preferred-address-types=InternalIP", "--enable-bootstrap-token-auth", "--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction", "--allow-privileged=true",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local", "--service-account-key-file=" + pki + "sa.pub",
		"--service-account-signing-key-file=" + pki + "sa.key",
		"--requestheader-client-ca-file=" + pki + "front-proxy-ca.crt", "--requestheader-allowed-names=front-proxy-client",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-", "--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--proxy-client-cert-file=" + pki + "front-proxy-client.crt", "--proxy-client-key-file=" + pki + "front-proxy-client.key"}
	common := func(conf string) []string {
		return []string{"--kubeconfig=" + kc + conf, "--authentication-kubeconfig=" + kc + conf, "--authorization-kubeconfig=" + kc + conf,
			"--bind-address=127.0.0.1", "--leader-elect=false"}
	}
	controllerManager := append([]string{"/usr/local/bin/kube-controller-manager"}, common("controller-manager.conf")...)
	controllerManager = append(controllerManager, "--cluster-name="+name, "--client-ca-file="+pki+"ca.crt",
		"--cluster-signing-cert-file="+pki+"ca.crt", "--cluster-signing-key-file="+pki+"ca.key",
		"--requestheader-client-ca-file="+pki+"front-proxy-ca.crt", "--root-ca-file="+pki+"ca.crt",
		"--service-account-private-key-file="+pki+"sa.key", "--use-service-account-credentials=true",
		// bootstrapsigner signs cluster-info for kubeadm join's discovery by token.
		"--controllers=*,bootstrapsigner,tokencleaner",
		// A worker whose guest stopped is NotReady after 20 s, not 50, for the health check.
		"--node-monitor-grace-period=20s")
	scheduler := append([]string{"/usr/local/bin/kube-scheduler"}, common("scheduler.conf")...)
	etcd := []string{"/usr/local/bin/etcd", "--data-dir=/var/lib/etcd/data", "--listen-client-urls=http://127.0.0.1:2379",
		"--advertise-client-urls=http://127.0.0.1:2379", "--listen-peer-urls=http://127.0.0.1:2380",
		"--initial-advertise-peer-urls=http://127.0.0.1:2380", "--initial-cluster=default=http://127.0.0.1:2380"}

	mounts := []corev1.VolumeMount{{Name: "pki", MountPath: pki, ReadOnly: true}, {Name: "kubeconfig", MountPath: kc, ReadOnly: true}}
	container := func(cname string, command []string, cpu, mem string) corev1.Container {
		return corev1.Container{Name: cname, Image: tenantCPImage, Command: command, VolumeMounts: mounts,
			Resources:       corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}
	}
	api := container("kube-apiserver", apiserver, "50m", "256Mi")
	api.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(6443), Scheme: corev1.URISchemeHTTPS}},
		PeriodSeconds: 2}
	db := container("etcd", etcd, "50m", "64Mi")
	db.VolumeMounts = []corev1.VolumeMount{{Name: "etcd", MountPath: "/var/lib/etcd"}}
	labels := map[string]string{"app": service}
	nonroot := int64(65532)
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-control-plane"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: &nonroot, RunAsGroup: &nonroot, FSGroup: &nonroot,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{db, api,
						container("kube-controller-manager", controllerManager, "20m", "128Mi"), container("kube-scheduler", scheduler, "10m", "64Mi")},
					Volumes: []corev1.Volume{
						{Name: "pki", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name + "-pki", DefaultMode: ptr.To[int32](0o440)}}},
						{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name + "-kubeconfigs", DefaultMode: ptr.To[int32](0o440)}}},
						{Name: "etcd", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					}}}}}
}

func kubeadmPhase(t *testing.T, kubeadm string, args ...string) {
	t.Helper()
	out, err := exec.Command(kubeadm, append([]string{"init", "phase"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubeadm init phase %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
