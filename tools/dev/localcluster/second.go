package main

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A second node on the same machine (node-up, node-down): its own containerd, kubelet and
// kube-proxy in a network namespace of their own, joined to the host by a veth; containerd and
// the kubelet share a private mount namespace in which /var/lib/kubelet, /var/lib/virtpod and
// /var/log/containers are the node's own folders, because the kubelet's device-plugin folder,
// the node agent's pod-resources socket and the runners' control folders have fixed host paths.
const (
	secondDirName     = "node-2"
	secondNodeIP      = "10.217.0.2"
	secondPodCIDR     = "10.218.1.0/24"
	secondNodeIP6     = "fd00:217::2"
	secondPodCIDR6    = "fd00:218:0:1::/64"
	secondPodBridge   = "vpcni2" // in the node's network namespace
	secondState       = "/run/virtpod-containerd-2"
	secondID          = "vpnode2" // its network namespace, the veth's host end, its cgroup root
	defaultSecondName = "virtpod-node-2"
)

// second is the second node: the cluster's settings with the node's own folder, address, pod
// range, containerd state and cgroup root. Its name is the one node-up last gave it.
func (c *cluster) second() *cluster {
	n := *c
	n.dir = c.path(secondDirName)
	n.nodeIP, n.podCIDR, n.podBridge = secondNodeIP, secondPodCIDR, secondPodBridge
	n.nodeIP6, n.podCIDR6 = secondNodeIP6, secondPodCIDR6
	n.ctrdState, n.cgroupRoot, n.primary = secondState, secondID, c
	n.imagesDir, n.importToo = "", false
	n.nodeName = ""
	if b, err := os.ReadFile(n.path("name")); err == nil {
		n.nodeName = strings.TrimSpace(string(b))
	}
	return &n
}

// secondComponents in start order.
var secondComponents = []string{"containerd", "kubelet", "kube-proxy"}

func (c *cluster) nodeUp(ctx context.Context, name string) error {
	begin := time.Now()
	closeInherited()
	for _, comp := range []string{"kube-apiserver", "registry", "kubelet"} {
		if _, ok := c.alive(comp); !ok {
			return fmt.Errorf("%s is not running: start the cluster first (make cluster-up)", comp)
		}
	}
	n := c.second()
	if n.nodeName != "" && n.nodeName != name && n.anyRunning() {
		return fmt.Errorf("the second node runs as %s: run node-down first", n.nodeName)
	}
	n.nodeName = name
	if err := writeFile(n.path("name"), name+"\n", 0o644); err != nil {
		return err
	}
	if err := n.nodePKI(); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	server := fmt.Sprintf("https://%s:%d", c.nodeIP, apiserverPort)
	kubeletKC, err := n.kubeconfig("kubelet", server)
	if err != nil {
		return err
	}
	proxyKC, err := n.kubeconfig("kube-proxy", server)
	if err != nil {
		return err
	}
	ctrdConf, err := n.containerdConfig()
	if err != nil {
		return err
	}
	if err := n.cniConfig(); err != nil {
		return err
	}
	kubeletConf, err := n.kubeletConfig()
	if err != nil {
		return err
	}
	proxyConf, err := n.kubeProxyConfig(proxyKC)
	if err != nil {
		return err
	}
	if err := makeCgroupRoot(n.cgroupRoot); err != nil {
		return fmt.Errorf("cgroup root /%s: %w", n.cgroupRoot, err)
	}
	if err := n.nodeNetwork(secondID, secondID); err != nil {
		return err
	}
	binds := [][2]string{{n.path("kubelet"), "/var/lib/kubelet"}, {n.path("virtpod"), "/var/lib/virtpod"}, {n.path("log-containers"), "/var/log/containers"}}
	for _, b := range binds {
		for _, d := range b {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	admin, err := clientFor(c.path("kubeconfig", "admin.kubeconfig"))
	if err != nil {
		return err
	}
	inNode := func(ns []string, bin string, args ...string) []string {
		return append(append(append([]string{"node-exec", "--netns=" + netnsPath(secondID)}, ns...), "--", bin), args...)
	}
	// A new containerd is a new mount namespace: a kubelet left in the old one must go too.
	if _, ok := n.alive("containerd"); !ok {
		if err := n.stop("kubelet"); err != nil {
			return err
		}
	}
	mountNS := []string{"--new-mount-ns"}
	for _, b := range binds {
		mountNS = append(mountNS, "--bind="+b[0]+":"+b[1])
	}
	fmt.Printf("starting node %s in %s\n", name, n.dir)
	if err := n.start(ctx, component{name: "containerd", bin: self,
		args:  inNode(mountNS, c.binFor("containerd"), "--config="+ctrdConf),
		env:   []string{"PATH=" + c.ctrdBin + ":" + os.Getenv("PATH")},
		ready: socketReady(n.socket())}); err != nil {
		return err
	}
	ctrd, ok := n.alive("containerd")
	if !ok {
		return fmt.Errorf("the node's containerd stopped")
	}
	rest := []component{
		{name: "kubelet", bin: self, args: inNode([]string{"--mount-ns=/proc/" + strconv.Itoa(ctrd) + "/ns/mnt"}, c.binFor("kubelet"),
			"--config="+kubeletConf, "--kubeconfig="+kubeletKC, "--root-dir="+n.path("kubelet"),
			"--node-ip="+n.nodeIP+","+n.nodeIP6, "--hostname-override="+name, "--v=1"),
			env:   []string{"PATH=" + c.ctrdBin + ":" + os.Getenv("PATH")},
			ready: nodeReady(admin, name)},
		{name: "kube-proxy", bin: self, args: inNode(nil, c.binFor("kube-proxy"), "--config="+proxyConf),
			ready: httpReady(http.DefaultClient, "http://"+net.JoinHostPort(n.nodeIP, "10256")+"/healthz")},
	}
	for _, comp := range rest {
		if err := n.start(ctx, comp); err != nil {
			return err
		}
	}
	fmt.Printf("node %s up in %.1fs (address %s, pods %s)\n", name, time.Since(begin).Seconds(), n.nodeIP, n.podCIDR)
	return nil
}

func (n *cluster) anyRunning() bool {
	for _, name := range secondComponents {
		if _, ok := n.alive(name); ok {
			return true
		}
	}
	return false
}

// nodeDown stops the second node, removes what it made and, unless keepNode (a node-loss
// test's "the node died"), its Node object.
func (c *cluster) nodeDown(keepNode bool) error {
	n := c.second()
	errs := c.stopSecond()
	if !keepNode && n.nodeName != "" {
		if err := c.deleteNode(n.nodeName); err != nil {
			errs = append(errs, err)
		}
	}
	if !keepNode {
		_ = os.Remove(n.path("name"))
	}
	for _, l := range append(c.secondLeftovers(keepNode), n.processesLeft()...) {
		errs = append(errs, errors.New(l))
	}
	if len(errs) > 0 {
		return fmt.Errorf("node-down left problems:\n  %v", errors.Join(errs...))
	}
	fmt.Printf("node %s down, nothing left behind; logs kept in %s\n", n.nodeName, n.path("logs"))
	return nil
}

// stopSecond stops the second node's processes and its pods' and removes its mounts, cgroups,
// network and state (its logs and its name stay).
func (c *cluster) stopSecond() []error {
	n := c.second()
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	note(n.stop("kube-proxy"))
	note(n.stop("kubelet"))
	killCgroups(n.cgroupRoot)
	killMatching(n.socket())
	note(n.stop("containerd"))
	killCgroups(n.cgroupRoot)
	// The node's own mounts lived in its mount namespace and went with its last process;
	// these are only what the host may see.
	unmountUnder(n.dir)
	unmountUnder(n.ctrdState)
	removeCgroups(n.cgroupRoot)
	errs = append(errs, n.removeNodeNetwork(secondID, secondID)...)
	note(os.RemoveAll(n.ctrdState))
	entries, _ := os.ReadDir(n.dir)
	for _, e := range entries {
		if e.Name() != "logs" && e.Name() != "name" {
			note(os.RemoveAll(n.path(e.Name())))
		}
	}
	return errs
}

func (c *cluster) deleteNode(name string) error {
	admin, err := clientFor(c.path("kubeconfig", "admin.kubeconfig"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		if _, up := c.alive("kube-apiserver"); up {
			return fmt.Errorf("deleting Node %s: %w", name, err)
		}
	}
	return nil
}

// secondLeftovers checks what stopSecond promises, processes aside (leftoverProcesses). The
// node's name file counts unless keepName (a node stopped, its Node object kept).
func (c *cluster) secondLeftovers(keepName bool) []string {
	n := c.second()
	var left []string
	for _, p := range append(mountsUnder(n.dir), mountsUnder(n.ctrdState)...) {
		left = append(left, "mount left: "+p)
	}
	if _, err := os.Stat(netnsPath(secondID)); err == nil {
		left = append(left, "network namespace left: "+netnsPath(secondID))
	}
	if _, err := netlink.LinkByName(secondID); err == nil {
		left = append(left, "veth left: "+secondID)
	}
	left = append(left, n.hostRoutesLeft()...)
	cgroups, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", n.cgroupRoot))
	for _, d := range cgroups {
		left = append(left, "cgroup left: "+d)
	}
	if _, err := os.Stat(n.ctrdState); err == nil {
		left = append(left, "left: "+n.ctrdState)
	}
	entries, _ := os.ReadDir(n.dir)
	for _, e := range entries {
		if e.Name() != "logs" && (e.Name() != "name" || !keepName) {
			left = append(left, "left: "+n.path(e.Name()))
		}
	}
	return left
}

// processesLeft lists the node's own processes that still run.
func (n *cluster) processesLeft() []string {
	procs := processes()
	ours := n.owned(procs, n.pidFiles())
	var left []string
	for _, p := range procs {
		if why, ok := ours[p.pid]; ok {
			left = append(left, fmt.Sprintf("process left: %s [pid %d, node %s, %s]", p, p.pid, secondDirName, why))
		}
	}
	return left
}

// makeCgroupRoot makes /name in every cgroup v1 hierarchy, as the kubelet wants its
// cgroupRoot to exist; a cpuset gets its parent's CPUs and memory nodes, without which
// nothing could run in it.
func makeCgroupRoot(name string) error {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	for _, procs := range hierarchies {
		h := filepath.Dir(procs)
		d := filepath.Join(h, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if cur, _ := os.ReadFile(filepath.Join(d, f)); strings.TrimSpace(string(cur)) != "" {
				continue
			}
			if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(d, f), err)
			}
		}
	}
	return nil
}

// nodePKI issues the node's kubelet client (system:node:NAME), kubelet serving (its address)
// and kube-proxy certificates from the cluster's CA, into the node's pki folder.
func (n *cluster) nodePKI() error {
	caDir := n.primary.path("pki")
	caPEM, err := os.ReadFile(filepath.Join(caDir, "ca.crt"))
	if err != nil {
		return err
	}
	block, _ := pem.Decode(caPEM)
	if block == nil {
		return fmt.Errorf("%s: no certificate", filepath.Join(caDir, "ca.crt"))
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(filepath.Join(caDir, "ca.key"))
	if err != nil {
		return err
	}
	if block, _ = pem.Decode(keyPEM); block == nil {
		return fmt.Errorf("%s: no key", filepath.Join(caDir, "ca.key"))
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return fmt.Errorf("the CA key cannot sign")
	}
	dir := n.path("pki")
	if issuedTo(filepath.Join(dir, "kubelet.crt")) == "system:node:"+n.nodeName {
		return nil // a running kubelet keeps its certificates
	}
	if err := writeFile(filepath.Join(dir, "ca.crt"), string(caPEM), 0o644); err != nil {
		return err
	}
	ip := net.ParseIP(n.nodeIP)
	serial := time.Now().UnixNano()
	for i, ct := range []cert{
		{name: "kubelet-serving", cn: n.nodeName, server: true, ips: []net.IP{ip, net.ParseIP("127.0.0.1")}, dns: []string{n.nodeName, "localhost"}},
		{name: "kubelet", cn: "system:node:" + n.nodeName, orgs: []string{"system:nodes"}},
		{name: "kube-proxy", cn: "system:kube-proxy"},
	} {
		if err := issue(dir, ct, serial+int64(i), ca, signer); err != nil {
			return fmt.Errorf("issuing %s: %w", ct.name, err)
		}
	}
	return nil
}

// issuedTo is the common name of the certificate in file, "" when there is none.
func issuedTo(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return ""
	}
	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return ""
	}
	return crt.Subject.CommonName
}
