package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Addresses the tool creates and uses, and nothing else: the node's /32 on a bridge of its own
// (no dummy interfaces without kernel modules), pods and Services in private ranges that the
// runner tests (10.213.0.0/24, fd00:213::/48) do not use. The cluster is dual-stack, IPv4 first:
// every pod and Service has an address of each family.
const (
	defaultNodeIP       = "10.217.0.1"
	nodeIP6             = "fd00:217::1" // /64 on the node bridge, which a second node shares
	podCIDR             = "10.218.0.0/24"
	podCIDR6            = "fd00:218::/64"
	clusterCIDR         = "10.218.0.0/16" // every node's pod range: 10.218.N-1.0/24 on node N
	clusterCIDR6        = "fd00:218::/56" // fd00:218:0:N-1::/64 on node N
	serviceCIDR         = "10.219.0.0/24"
	serviceCIDR6        = "fd00:219::/112"
	kubernetesServiceIP = "10.219.0.1"
	nodeBridge          = "vpnode0"
	podBridge           = "vpcni0"
	apiserverPort       = 6443
	etcdClientURL       = "http://127.0.0.1:22379"
	etcdPeerURL         = "http://127.0.0.1:22380"
	containerdState     = "/run/virtpod-containerd"
)

func (c *cluster) socket() string { return c.ctrdState + "/containerd.sock" }

// kubeconfig writes a kubeconfig for a client certificate in the pki folder.
func (c *cluster) kubeconfig(name, server string) (string, error) {
	pki := c.path("pki")
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: virtpod-local
  cluster:
    server: %s
    certificate-authority: %s
contexts:
- name: virtpod-local
  context: {cluster: virtpod-local, user: %s}
current-context: virtpod-local
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
`, server, filepath.Join(pki, "ca.crt"), name, name, filepath.Join(pki, name+".crt"), filepath.Join(pki, name+".key"))
	path := c.path("kubeconfig", name+".kubeconfig")
	return path, writeFile(path, body, 0o600)
}

func (c *cluster) containerdConfig() (string, error) {
	hosts, err := c.registryHosts()
	if err != nil {
		return "", err
	}
	// A second node's containerd shares this machine with the first: everything it would put
	// in a fixed place (the NRI socket, runc's state) goes under its own state folder instead.
	// Every node keeps its pods' network namespace files there too, not in /run/netns: the
	// first `ip netns add` on this machine (the runner tests make namespaces) bind-mounts
	// /run/netns over itself, hiding the pods' namespace mounts under it, and containerd could
	// then never remove them (unlinkat: device or resource busy; the pods stay Terminating).
	var nri, runc string
	runtime := "\n  netns_mounts_under_state_dir = true"
	if c.primary != nil {
		nri = fmt.Sprintf("\n[plugins.'io.containerd.nri.v1.nri']\n  socket_path = %q\n", c.ctrdState+"/nri.sock")
		runc = fmt.Sprintf("\n        Root = %q", c.ctrdState+"/runc")
	}
	body := fmt.Sprintf(`version = 3
root = %q
state = %q

[grpc]
  address = %q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %q
%s
[plugins.'io.containerd.cri.v1.runtime']
  # root lacks CAP_SYS_RESOURCE here: runc must not lower oom_score_adj below its own.
  restrict_oom_score_adj = true
  # A non-root container gets its devices (/dev/kvm, /dev/net/tun, Block claims) owned by its
  # user and group, as virtpod's runner needs (docs/security.md).
  device_ownership_from_security_context = true%s
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false%s
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%q]
    conf_dir = %q
`, c.path("containerd", "root"), c.ctrdState, c.socket(), c.sandboxImage(), hosts, nri, runtime, c.runc, runc, c.cniBin, c.path("cni", "net.d"))
	path := c.path("config", "containerd.toml")
	return path, writeFile(path, body, 0o644)
}

func (c *cluster) cniConfig() error {
	body := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "virtpod",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}], [{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
        "dataDir": %q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, c.podBridge, c.podCIDR, c.podCIDR6, c.path("cni", "ipam"))
	return writeFile(c.path("cni", "net.d", "10-virtpod.conflist"), body, 0o644)
}

func (c *cluster) kubeletConfig() (string, error) {
	pki := c.path("pki")
	body := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
# cgroups are v1 on these machines, without systemd.
cgroupDriver: cgroupfs
failCgroupV1: false
containerRuntimeEndpoint: unix://%s
tlsCertFile: %s
tlsPrivateKeyFile: %s
clusterDomain: cluster.local
clusterDNS: [%s, %s]
failSwapOn: false
podLogsDir: %s
serializeImagePulls: false
# A development machine's disk and memory are shared: evict only when nearly out.
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%%", "imagefs.available": "1%%", "nodefs.inodesFree": "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# Pods are synced every 10 s rather than every minute, so a ConfigMap or Secret volume (a VM's
# virtio-fs share among them) shows an update within seconds during development.
syncFrequency: 10s
# The node's lease is renewed every 2.5 s (a quarter of its duration) rather than every 10 s, so
# the controller manager's 20 s grace (up.go) still sees eight renewals: a node that stops is
# NotReady within about 20 s instead of 50, and the node-loss test does not wait out a minute.
nodeLeaseDurationSeconds: 10
`, filepath.Join(pki, "ca.crt"), c.socket(), filepath.Join(pki, "kubelet-serving.crt"), filepath.Join(pki, "kubelet-serving.key"), clusterDNSIP, clusterDNSIP6, c.path("pod-logs"))
	if c.cgroupRoot != "" {
		// Its pods' cgroups under a root of its own: two kubelets' kubepods trees in one
		// cgroup v1 hierarchy would fight over the same folders.
		body += fmt.Sprintf("cgroupRoot: /%s\n", c.cgroupRoot)
	}
	path := c.path("config", "kubelet.yaml")
	return path, writeFile(path, body, 0o644)
}

func (c *cluster) kubeProxyConfig(kubeconfig string) (string, error) {
	body := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s}
mode: iptables
clusterCIDR: %s,%s
hostnameOverride: %s
# Do not touch conntrack sysctls: root here cannot set them, and a one-node cluster needs none.
conntrack: {maxPerCore: 0}
`, kubeconfig, clusterCIDR, clusterCIDR6, c.nodeName)

	path := c.path("config", "kube-proxy.yaml")
	return path, writeFile(path, body, 0o644)
}

// writeFile writes body to path unless the file holds it already: kube-proxy exits, and
// containerd reloads its CNI configuration, when a file they watch is written, even unchanged
// (a repeated up or node-up).
func writeFile(path, body string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b := []byte(strings.TrimLeft(body, "\n"))
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return nil
	}
	return os.WriteFile(path, b, mode)
}
