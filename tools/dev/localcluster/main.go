// Command localcluster runs a one-node Kubernetes cluster built from source on this machine:
// etcd, an OCI registry, kube-apiserver, kube-controller-manager, kube-scheduler, containerd,
// kubelet and kube-proxy, each a process with a pid file and a log in one folder. `node-up`
// adds a second node in namespaces of its own (second.go). `down` leaves nothing behind. It
// stands in for kind where there is no Docker.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/virtpod/virtpod/tools/dev/devcache"
)

// cluster is where the cluster keeps its state and where its binaries are.
type cluster struct {
	dir       string // state: pki, kubeconfigs, configs, data, logs, pids
	k8sBin    string
	etcdBin   string
	regBin    string
	ctrdBin   string
	runc      string
	cniBin    string
	nodeName  string
	nodeIP    string
	nodeIP6   string
	imagesDir string // image archives pushed to the registry on `up`
	importToo bool   // also import them into containerd with ctr (the fallback without a registry)

	// What differs between the first node and a second one (second.go).
	ctrdState  string   // containerd's state folder, its socket in it
	podCIDR    string   // the node's pods' range
	podCIDR6   string   // and its IPv6 one
	podBridge  string   // the CNI bridge its pods hang on
	cgroupRoot string   // the kubelet's cgroup root, "" for the default
	primary    *cluster // on a second node: the cluster it joins (its registry, its CA)
}

// firstNode sets what the first node uses: the host's network namespace and mount namespace.
func (c *cluster) firstNode() {
	c.ctrdState, c.podCIDR, c.podCIDR6, c.podBridge = containerdState, podCIDR, podCIDR6, podBridge
	c.nodeIP6 = nodeIP6
}

func (c *cluster) path(parts ...string) string {
	return filepath.Join(append([]string{c.dir}, parts...)...)
}

// binFor maps a component to its binary.
func (c *cluster) binFor(name string) string {
	switch name {
	case "etcd":
		return filepath.Join(c.etcdBin, "etcd")
	case "containerd":
		return filepath.Join(c.ctrdBin, "containerd")
	case "registry":
		return filepath.Join(c.regBin, "registry")
	default:
		return filepath.Join(c.k8sBin, name)
	}
}

func main() {
	cache := devcache.Root()
	c := &cluster{}
	c.firstNode()
	root := &cobra.Command{
		Use:           "localcluster",
		Short:         "A one-node Kubernetes cluster from source, for virtpod's demo and end-to-end tests",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	f := root.PersistentFlags()
	f.StringVar(&c.dir, "dir", filepath.Join(cache, "cluster"), "folder for the cluster's state, logs and pid files")
	f.StringVar(&c.k8sBin, "k8s-bin", filepath.Join(cache, "k8s-v1.37.2"), "folder with kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl")
	f.StringVar(&c.etcdBin, "etcd-bin", filepath.Join(cache, "etcd-v3.6.16"), "folder with etcd")
	f.StringVar(&c.regBin, "registry-bin", filepath.Join(cache, "registry-v3.1.2"), "folder with registry (CNCF distribution)")
	f.StringVar(&c.ctrdBin, "containerd-bin", filepath.Join(cache, "containerd-v2.4.2"), "folder with containerd, containerd-shim-runc-v2 and ctr")
	f.StringVar(&c.runc, "runc", "/usr/sbin/runc", "runc binary (Debian package runc)")
	f.StringVar(&c.cniBin, "cni-bin", "/usr/lib/cni", "CNI plugin folder (Debian package containernetworking-plugins)")
	f.StringVar(&c.nodeName, "node-name", "virtpod-node", "the node's name")
	f.StringVar(&c.nodeIP, "node-ip", defaultNodeIP, "the node's address, put on a bridge of its own as a /32")
	up := &cobra.Command{
		Use:   "up",
		Short: "Start the cluster (a no-op for parts already running) and print the kubeconfig's path",
		RunE:  func(cmd *cobra.Command, _ []string) error { return c.up(cmd.Context()) },
	}
	up.Flags().StringVar(&c.imagesDir, "images", filepath.Join(cache, "images"), "image archives (*.tar) to push to the cluster's registry")
	up.Flags().BoolVar(&c.importToo, "import", false, "also import the archives into containerd with ctr, as before the registry (a fallback)")
	var quiet bool
	status := &cobra.Command{Use: "status", Short: "Show each component and the node; with --quiet, exit 0 only when all run",
		RunE: func(cmd *cobra.Command, _ []string) error { return c.status(cmd.Context(), quiet) }}
	status.Flags().BoolVarP(&quiet, "quiet", "q", false, "print nothing; exit non-zero unless every component runs")
	var nodeName string
	var keepNode bool
	nodeUp := &cobra.Command{Use: "node-up", Short: "Start a second node (the cluster must be up; a no-op for parts already running)",
		RunE: func(cmd *cobra.Command, _ []string) error { return c.nodeUp(cmd.Context(), nodeName) }}
	nodeUp.Flags().StringVar(&nodeName, "name", defaultSecondName, "the second node's name")
	nodeDown := &cobra.Command{Use: "node-down", Short: "Stop the second node, remove what it made and delete its Node object",
		RunE: func(*cobra.Command, []string) error { return c.nodeDown(keepNode) }}
	nodeDown.Flags().BoolVar(&keepNode, "keep-node-object", false, "leave the Node object (it goes NotReady), as a node that died would")
	root.AddCommand(nodeUp, nodeDown, nodeExecCommand())
	root.AddCommand(up,
		&cobra.Command{Use: "down", Short: "Stop everything and remove processes, mounts, bridges, iptables chains and state",
			RunE: func(*cobra.Command, []string) error { return c.down() }},
		status,
		&cobra.Command{Use: "kubeconfig", Short: "Print the admin kubeconfig's path",
			Run: func(*cobra.Command, []string) { fmt.Println(c.path("kubeconfig", "admin.kubeconfig")) }},
	)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}
