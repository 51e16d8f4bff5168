package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func (c *cluster) up(ctx context.Context) error {
	begin := time.Now()
	closeInherited()
	if err := c.clearStale(); err != nil {
		return err
	}
	if err := c.pki(); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	if err := c.nodeAddress(); err != nil {
		return fmt.Errorf("node address %s on bridge %s: %w", c.nodeIP, nodeBridge, err)
	}
	server := fmt.Sprintf("https://%s:%d", c.nodeIP, apiserverPort)
	kc := map[string]string{}
	for _, n := range []string{"admin", "controller-manager", "scheduler", "kubelet", "kube-proxy"} {
		p, err := c.kubeconfig(n, server)
		if err != nil {
			return err
		}
		kc[n] = p
	}
	ctrdConf, err := c.containerdConfig()
	if err != nil {
		return err
	}
	if err := c.cniConfig(); err != nil {
		return err
	}
	if err := podMasquerade(c.podCIDR); err != nil {
		return fmt.Errorf("masquerading pods that leave the cluster: %w", err)
	}
	kubeletConf, err := c.kubeletConfig()
	if err != nil {
		return err
	}
	proxyConf, err := c.kubeProxyConfig(kc["kube-proxy"])
	if err != nil {
		return err
	}
	pki := func(f string) string { return c.path("pki", f) }
	adminTLS, err := tlsClient(pki("ca.crt"), pki("admin.crt"), pki("admin.key"))
	if err != nil {
		return err
	}
	registry, err := c.registryComponent()
	if err != nil {
		return err
	}
	comps := []component{
		{name: "etcd", bin: c.binFor("etcd"), args: []string{
			"--name=virtpod", "--data-dir=" + c.path("etcd"),
			"--listen-client-urls=" + etcdClientURL, "--advertise-client-urls=" + etcdClientURL,
			"--listen-peer-urls=" + etcdPeerURL, "--initial-advertise-peer-urls=" + etcdPeerURL,
			"--initial-cluster=virtpod=" + etcdPeerURL, "--listen-metrics-urls=http://127.0.0.1:22381",
			"--quota-backend-bytes=4294967296", "--unsafe-no-fsync"},
			ready: httpReady(http.DefaultClient, etcdClientURL+"/health")},
		registry,
		{name: "kube-apiserver", bin: c.binFor("kube-apiserver"), args: []string{
			"--etcd-servers=" + etcdClientURL, "--bind-address=0.0.0.0", "--advertise-address=" + c.nodeIP,
			"--secure-port=" + strconv.Itoa(apiserverPort), "--service-cluster-ip-range=" + serviceCIDR + "," + serviceCIDR6,
			"--client-ca-file=" + pki("ca.crt"), "--tls-cert-file=" + pki("apiserver.crt"), "--tls-private-key-file=" + pki("apiserver.key"),
			"--kubelet-client-certificate=" + pki("apiserver-kubelet-client.crt"), "--kubelet-client-key=" + pki("apiserver-kubelet-client.key"),
			"--kubelet-certificate-authority=" + pki("ca.crt"), "--kubelet-preferred-address-types=InternalIP",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + pki("sa.pub"), "--service-account-signing-key-file=" + pki("sa.key"),
			"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
			// Nothing virtpod runs needs privileges; the cluster refuses privileged pods outright.
			"--allow-privileged=false"},
			ready: httpReady(adminTLS, fmt.Sprintf("https://127.0.0.1:%d/readyz", apiserverPort))},
		{name: "kube-controller-manager", bin: c.binFor("kube-controller-manager"), args: []string{
			"--kubeconfig=" + kc["controller-manager"], "--authentication-kubeconfig=" + kc["controller-manager"],
			"--authorization-kubeconfig=" + kc["controller-manager"], "--leader-elect=false",
			"--root-ca-file=" + pki("ca.crt"), "--service-account-private-key-file=" + pki("sa.key"),
			"--cluster-signing-cert-file=" + pki("ca.crt"), "--cluster-signing-key-file=" + pki("ca.key"),
			"--use-service-account-credentials", "--bind-address=127.0.0.1",
			// A node silent for 20 s is NotReady (default 50 s); the kubelets renew their
			// leases every 2.5 s (configs.go), so a busy machine does not flap.
			"--node-monitor-grace-period=20s"},
			ready: httpReady(insecureTLS(), "https://127.0.0.1:10257/healthz")},
		{name: "kube-scheduler", bin: c.binFor("kube-scheduler"), args: []string{
			"--kubeconfig=" + kc["scheduler"], "--authentication-kubeconfig=" + kc["scheduler"],
			"--authorization-kubeconfig=" + kc["scheduler"], "--leader-elect=false", "--bind-address=127.0.0.1"},
			ready: httpReady(insecureTLS(), "https://127.0.0.1:10259/healthz")},
		{name: "containerd", bin: c.binFor("containerd"), args: []string{"--config=" + ctrdConf},
			env:   []string{"PATH=" + c.ctrdBin + ":" + os.Getenv("PATH")},
			ready: socketReady(c.socket())},
	}
	fmt.Printf("starting the cluster in %s\n", c.dir)
	for _, comp := range comps {
		if err := c.start(ctx, comp); err != nil {
			return err
		}
	}
	images, err := c.pushImages(ctx)
	if err != nil {
		return err
	}
	admin, err := clientFor(kc["admin"])
	if err != nil {
		return err
	}
	// The kubelet serves pod-resources under its --root-dir; the node agent finds it where a
	// kubelet with the default root has it (config/agent), as on any other node.
	if err := linkPodResources(c.path("kubelet")); err != nil {
		return err
	}
	rest := []component{
		{name: "kubelet", bin: c.binFor("kubelet"), args: []string{
			"--config=" + kubeletConf, "--kubeconfig=" + kc["kubelet"], "--root-dir=" + c.path("kubelet"),
			"--node-ip=" + c.nodeIP + "," + c.nodeIP6, "--hostname-override=" + c.nodeName, "--v=1"},
			env:   []string{"PATH=" + c.ctrdBin + ":" + os.Getenv("PATH")},
			ready: nodeReady(admin, c.nodeName)},
		{name: "kube-proxy", bin: c.binFor("kube-proxy"), args: []string{"--config=" + proxyConf},
			ready: httpReady(http.DefaultClient, "http://127.0.0.1:10256/healthz")},
	}
	for _, comp := range rest {
		if err := c.start(ctx, comp); err != nil {
			return err
		}
	}
	if err := c.startDNS(ctx, kc["admin"], images); err != nil {
		return err
	}
	if err := c.storage(ctx, admin); err != nil {
		return err
	}
	fmt.Printf("cluster up in %.1fs\n  export KUBECONFIG=%s\n  stop it with: make demo-down\n", time.Since(begin).Seconds(), kc["admin"])
	return nil
}

// closeInherited marks every file this process inherited beyond stdin, stdout and stderr
// close-on-exec, so the cluster's processes, which outlive `up`, do not hold them: a lock taken
// by whoever ran `up` (flock /tmp/virtpod-heavy.lock make cluster-up) would otherwise stay held
// until the cluster stops.
func closeInherited() {
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, e := range fds {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// clearStale removes what a cluster that was killed rather than stopped (a machine restart, an
// ended session) left behind, so `up` starts clean. A cluster with any part running is kept.
func (c *cluster) clearStale() error {
	for _, name := range components {
		if _, ok := c.alive(name); ok {
			return nil
		}
	}
	if len(c.leftovers()) == 0 {
		if _, err := os.Stat(c.path("etcd")); err != nil {
			return nil
		}
	}
	fmt.Println("clearing what a previous cluster left behind")
	return c.down()
}

// nodeAddress gives the node its address on a bridge of its own: this machine has no dummy
// interfaces, and the address must be one the tool created.
func (c *cluster) nodeAddress() error {
	link, err := netlink.LinkByName(nodeBridge)
	if err != nil {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: nodeBridge}}
		if err := netlink.LinkAdd(br); err != nil {
			return err
		}
		if link, err = netlink.LinkByName(nodeBridge); err != nil {
			return err
		}
	}
	addr, err := netlink.ParseAddr(c.nodeIP + "/32")
	if err != nil {
		return err
	}
	if err := netlink.AddrReplace(link, addr); err != nil {
		return err
	}
	// IPv6: a /64 a second node shares (no duplicate detection: the address is usable at
	// once), and forwarding, as the IPv4 pods' routing has it.
	addr6, err := netlink.ParseAddr(c.nodeIP6 + "/64")
	if err != nil {
		return err
	}
	addr6.Flags = unix.IFA_F_NODAD
	if err := netlink.AddrReplace(link, addr6); err != nil {
		return err
	}
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("IPv6 forwarding: %w", err)
	}
	return netlink.LinkSetUp(link)
}

func httpReady(client *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}
}

func socketReady(path string) func(context.Context) error {
	return func(context.Context) error {
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err != nil {
			return err
		}
		return conn.Close()
	}
}

func nodeReady(cs kubernetes.Interface, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready", name)
	}
}

func clientFor(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 5 * time.Second
	return kubernetes.NewForConfig(cfg)
}

func tlsClient(ca, crt, key string) (*http.Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("https://127.0.0.1", "")
	if err != nil {
		return nil, err
	}
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = ca, crt, key
	cfg.Timeout = 3 * time.Second
	return restHTTPClient(cfg)
}

func insecureTLS() *http.Client {
	// Component health endpoints on loopback serve self-signed certificates.
	return &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
}

// linkPodResources makes /var/lib/kubelet/pod-resources the pod-resources directory of a
// kubelet whose root is root.
func linkPodResources(root string) error {
	target := filepath.Join(root, "pod-resources")
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll("/var/lib/kubelet", 0o755); err != nil {
		return err
	}
	link := "/var/lib/kubelet/pod-resources"
	if old, err := os.Readlink(link); err == nil && old == target {
		return nil
	}
	_ = os.Remove(link)
	if err := os.Symlink(target, link); err != nil {
		return fmt.Errorf("pod-resources link for the node agent: %w", err)
	}
	return nil
}
