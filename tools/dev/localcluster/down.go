package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/rest"
)

// down stops the cluster and removes everything it made: processes (by pid file, then every
// process left in the kubepods cgroups, shims included), mounts, network namespaces, bridges,
// iptables chains and state.
func (c *cluster) down() error {
	var errs []string
	note := func(err error) {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	for _, err := range c.stopSecond() {
		note(err)
	}
	note(os.RemoveAll(c.second().path("name")))
	for _, name := range []string{"kube-proxy", "kubelet", "kube-scheduler", "kube-controller-manager", "kube-apiserver"} {
		note(c.stop(name))
	}
	killCgroups("kubepods")
	killMatching(c.socket()) // shims name their containerd's socket
	note(c.stop("containerd"))
	note(c.stop("registry"))
	note(c.stop("etcd"))
	killCgroups("kubepods")
	for _, root := range []string{c.dir, containerdState, "/run/netns", "/var/run/netns", "/var/lib/kubelet"} {
		unmountUnder(root)
	}
	removeCgroups("kubepods")
	for _, name := range []string{podBridge, nodeBridge} {
		if l, err := netlink.LinkByName(name); err == nil {
			note(netlink.LinkDel(l))
		}
	}
	note(cleanChains())
	for _, p := range []string{"/var/lib/kubelet/device-plugins", "/var/lib/kubelet", "/var/lib/virtpod/control", "/var/log/containers", "/var/log/pods", containerdState} {
		note(os.RemoveAll(p))
	}
	for _, sub := range []string{"etcd", "registry", "registry-images.json", "containerd", "kubelet", "cni", "pids", "pod-logs", "config", localPathDir} {
		note(os.RemoveAll(c.path(sub)))
	}
	netns, _ := filepath.Glob("/run/netns/cni-*")
	for _, n := range netns {
		note(os.Remove(n))
	}
	errs = append(errs, c.leftovers()...)
	if len(errs) > 0 {
		return fmt.Errorf("cleanup left problems:\n  %s", strings.Join(errs, "\n  "))
	}
	fmt.Printf("cluster down, nothing left behind; logs kept in %s\n", c.path("logs"))
	return nil
}

// leftovers checks what down promises: no component or container process, no mount, bridge or
// chain of ours. Processes count only when this cluster started them (owned).
func (c *cluster) leftovers() []string {
	left := c.leftoverProcesses()
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (strings.HasPrefix(f[4], c.dir+"/") || strings.HasPrefix(f[4], containerdState) || strings.HasPrefix(f[4], "/run/netns/cni-")) {
			left = append(left, "mount left: "+f[4])
		}
	}
	for _, name := range []string{podBridge, nodeBridge} {
		if _, err := netlink.LinkByName(name); err == nil {
			left = append(left, "bridge left: "+name)
		}
	}
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		ipt, err := iptables.NewWithProtocol(proto)
		if err != nil {
			continue
		}
		for _, table := range []string{"filter", "nat", "mangle"} {
			chains, _ := ipt.ListChains(table)
			for _, ch := range chains {
				if strings.HasPrefix(ch, "KUBE-") || strings.HasPrefix(ch, "CNI-") {
					left = append(left, fmt.Sprintf("chain left: %v %s %s", proto, table, ch))
				}
			}
		}
	}
	if _, err := os.Stat("/var/lib/kubelet/device-plugins"); err == nil {
		left = append(left, "left: /var/lib/kubelet/device-plugins")
	}
	return append(left, c.secondLeftovers(false)...)
}

// killCgroups kills every process in the named cgroup subtree of each v1 hierarchy: the pods'
// containers, which outlive the kubelet and containerd.
func killCgroups(name string) {
	for i := 0; i < 3; i++ {
		pids := map[int]bool{}
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", name))
		for _, d := range dirs {
			_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
				if err == nil && e.Name() == "cgroup.procs" {
					b, _ := os.ReadFile(p)
					for _, f := range strings.Fields(string(b)) {
						if pid, err := strconv.Atoi(f); err == nil {
							pids[pid] = true
						}
					}
				}
				return nil
			})
		}
		if len(pids) == 0 {
			return
		}
		for pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func removeCgroups(name string) {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", name))
	for _, d := range dirs {
		var all []string
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				all = append(all, p)
			}
			return nil
		})
		sort.Sort(sort.Reverse(sort.StringSlice(all))) // children first
		for _, p := range all {
			_ = unix.Rmdir(p)
		}
	}
}

// killMatching kills the processes with an argument that names path or something under it.
func killMatching(path string) {
	for _, p := range processes() {
		if mentions(p.argv, path) {
			_ = killWait(p.pid, 5*time.Second)
		}
	}
}

// unmountUnder detaches every mount below root, deepest first, and again while some remain: a
// point can hold more than one (seen with a pod's network namespace once CoreDNS ran until down:
// one pass left it, a second down removed it).
func unmountUnder(root string) {
	for range 5 {
		points := mountsUnder(root)
		if len(points) == 0 {
			return
		}
		for _, p := range points {
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	}
}

// mountsUnder lists the mount points at or below root, deepest first.
func mountsUnder(root string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == root || strings.HasPrefix(fields[4], root+"/")) {
			points = append(points, fields[4])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	return points
}

// cleanChains removes the chains kube-proxy and the CNI plugins made (KUBE-*, CNI-*) and the
// jumps to them, from IPv4 and IPv6 tables.
func cleanChains() error {
	var errs []string
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		ipt, err := iptables.NewWithProtocol(proto)
		if err != nil {
			continue // no ip6tables: nothing was made there either
		}
		for _, table := range []string{"filter", "nat", "mangle"} {
			chains, err := ipt.ListChains(table)
			if err != nil {
				continue
			}
			ours := func(ch string) bool { return strings.HasPrefix(ch, "KUBE-") || strings.HasPrefix(ch, "CNI-") }
			for _, ch := range chains {
				if !ours(ch) {
					deleteJumps(ipt, table, ch, ours)
				}
			}
			for _, ch := range chains {
				if ours(ch) {
					_ = ipt.ClearChain(table, ch)
				}
			}
			for _, ch := range chains {
				if ours(ch) {
					if err := ipt.DeleteChain(table, ch); err != nil {
						errs = append(errs, fmt.Sprintf("%s %s: %v", table, ch, err))
					}
				}
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("iptables: %s", strings.Join(errs, "; "))
	}
	return nil
}

// deleteJumps removes the rules of chain that jump to one of our chains, by position from the
// last, since rule texts with quoted comments do not survive a round trip through a shell split.
func deleteJumps(ipt *iptables.IPTables, table, chain string, ours func(string) bool) {
	rules, err := ipt.List(table, chain)
	if err != nil {
		return
	}
	var appended []string
	for _, r := range rules {
		if strings.HasPrefix(r, "-A ") {
			appended = append(appended, r)
		}
	}
	for i := len(appended) - 1; i >= 0; i-- {
		f := strings.Fields(appended[i])
		for j := 0; j+1 < len(f); j++ {
			if (f[j] == "-j" || f[j] == "-g") && ours(f[j+1]) {
				_ = ipt.DeleteById(table, chain, i+1)
				break
			}
		}
	}
}

func (c *cluster) status(ctx context.Context, quiet bool) error {
	if quiet {
		for _, name := range components {
			if _, ok := c.alive(name); !ok {
				return fmt.Errorf("%s is not running", name)
			}
		}
		return nil
	}
	for _, name := range components {
		if pid, ok := c.alive(name); ok {
			fmt.Printf("%-24s running (pid %d)\n", name, pid)
		} else {
			fmt.Printf("%-24s stopped\n", name)
		}
	}
	kc := c.path("kubeconfig", "admin.kubeconfig")
	cs, err := clientFor(kc)
	if err == nil {
		if err = nodeReady(cs, c.nodeName)(ctx); err == nil {
			fmt.Printf("node %s Ready\n", c.nodeName)
		}
	}
	if err != nil {
		fmt.Printf("node %s: %v\n", c.nodeName, err)
	}
	if n := c.second(); n.nodeName != "" || n.anyRunning() {
		for _, name := range secondComponents {
			if pid, ok := n.alive(name); ok {
				fmt.Printf("%-24s running (pid %d)\n", secondDirName+"/"+name, pid)
			} else {
				fmt.Printf("%-24s stopped\n", secondDirName+"/"+name)
			}
		}
		if cs != nil && n.nodeName != "" {
			if err := nodeReady(cs, n.nodeName)(ctx); err != nil {
				fmt.Printf("node %s: %v\n", n.nodeName, err)
			} else {
				fmt.Printf("node %s Ready\n", n.nodeName)
			}
		}
	}
	fmt.Printf("KUBECONFIG=%s\n", kc)
	return nil
}

// components in start order.
var components = []string{"etcd", "registry", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "containerd", "kubelet", "kube-proxy"}

func restHTTPClient(cfg *rest.Config) (*http.Client, error) { return rest.HTTPClientFor(cfg) }
