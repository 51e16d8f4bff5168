package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

// testCluster is a cluster whose state folder and pid files are in a temporary folder; nothing
// is started.
func testCluster(t *testing.T, pids map[string]int) *cluster {
	t.Helper()
	cache := t.TempDir()
	c := &cluster{dir: filepath.Join(cache, "cluster"), k8sBin: filepath.Join(cache, "k8s-v1.37.2"),
		etcdBin: filepath.Join(cache, "etcd-v3.6.16"), ctrdBin: filepath.Join(cache, "containerd-v2.4.2"),
		nodeName: "virtpod-node", nodeIP: defaultNodeIP, runc: "/usr/sbin/runc", cniBin: "/usr/lib/cni"}
	c.firstNode()
	for name, pid := range pids {
		if err := writeFile(c.path("pids", name+".pid"), strconv.Itoa(pid)+"\n", 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestOwnedOnlyWhatItStarted: the processes a test or benchmark runs from the same cached
// binaries (envtest's API server and etcd, a kubectl, a controller-manager on another state
// folder) are not the cluster's; its pid files, its state folder and its containerd socket are.
func TestOwnedOnlyWhatItStarted(t *testing.T) {
	c := testCluster(t, map[string]int{"kube-apiserver": 100, "etcd": 101, "kubelet": 102})
	if err := os.WriteFile(c.path("pids", "kube-proxy.pid"), []byte("not a pid"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := func(name string) string { return c.binFor(name) }
	procs := []proc{
		// The cluster's, by pid file.
		{100, []string{bin("kube-apiserver"), "--etcd-servers=http://127.0.0.1:22379", "--client-ca-file=" + c.path("pki", "ca.crt")}},
		{101, []string{bin("etcd"), "--data-dir=" + c.path("etcd")}},
		// The kubelet's pid was reused by another program: not ours.
		{102, []string{"/usr/bin/sleep", "600"}},
		// The cluster's kube-scheduler whose pid file is gone: its binary on the state folder.
		{200, []string{bin("kube-scheduler"), "--kubeconfig=" + c.path("kubeconfig", "scheduler.kubeconfig")}},
		// A shim and a ctr on the cluster's containerd.
		{201, []string{filepath.Join(c.ctrdBin, "containerd-shim-runc-v2"), "-namespace", "k8s.io", "-id", "abc", "-address", c.socket()}},
		{202, []string{filepath.Join(c.ctrdBin, "ctr"), "-a", c.socket(), "images", "import", "runner.tar"}},
		// envtest: the same binaries, other folders and ports.
		{300, []string{bin("kube-apiserver"), "--cert-dir=/tmp/envtest-serving-certs-123", "--etcd-servers=http://127.0.0.1:40123", "--secure-port=40124"}},
		{301, []string{bin("etcd"), "--data-dir=/tmp/k8s_test_framework_456", "--listen-client-urls=http://127.0.0.1:40123"}},
		// A kubectl on the cluster's kubeconfig, and this tool itself run with --dir: not components.
		{302, []string{filepath.Join(c.k8sBin, "kubectl"), "--kubeconfig=" + c.path("kubeconfig", "admin.kubeconfig"), "get", "vm", "-w"}},
		{303, []string{"/tmp/go-build1/b001/exe/localcluster", "--dir=" + c.dir, "status"}},
		// A component binary on a sibling state folder (cluster2) is another cluster's.
		{304, []string{bin("kube-controller-manager"), "--kubeconfig=" + c.dir + "2/kubeconfig/controller-manager.kubeconfig"}},
		// A containerd of another test, from the cached binaries, on its own socket.
		{305, []string{filepath.Join(c.ctrdBin, "containerd"), "--address=/tmp/containerdtest-1/containerd.sock"}},
		{306, nil},
	}
	got := c.owned(procs, c.pidFiles())
	want := map[int]string{
		100: "kube-apiserver (pid file)",
		101: "etcd (pid file)",
		200: "kube-scheduler (its pid file is gone)",
		201: "on " + c.socket(),
		202: "on " + c.socket(),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("owned:\n got %v\nwant %v", got, want)
	}
}

func TestPidFiles(t *testing.T) {
	c := testCluster(t, map[string]int{"etcd": 7, "kubelet": 9})
	for name, body := range map[string]string{"kube-proxy": "x", "containerd": "-3", "not-a-component": "11"} {
		if err := os.WriteFile(c.path("pids", name+".pid"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := c.pidFiles(), map[string]int{"etcd": 7, "kubelet": 9}; !reflect.DeepEqual(got, want) {
		t.Errorf("pid files: %v, want %v", got, want)
	}
}

func TestMentions(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"/x/cluster"}, true},
		{[]string{"--dir=/x/cluster"}, true},
		{[]string{"--root-dir=/x/cluster/kubelet"}, true},
		{[]string{"-a", "/x/cluster/containerd.sock"}, true},
		{[]string{"--dir=/x/cluster2"}, false},
		{[]string{"/x/clusterfoo/a"}, false},
		{[]string{"/y/x/cluster-old"}, false},
		{nil, false},
	} {
		if got := mentions(tc.args, "/x/cluster"); got != tc.want {
			t.Errorf("mentions(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestProcesses reads this machine's /proc: the test's parent is listed with its command line,
// the test itself is not (down must not kill the process running it).
func TestProcesses(t *testing.T) {
	var parent bool
	for _, p := range processes() {
		if p.pid == os.Getpid() {
			t.Errorf("lists itself: %v", p)
		}
		if p.pid == os.Getppid() && len(p.argv) > 0 && p.argv[0] != "" {
			parent = true
		}
	}
	if !parent {
		t.Errorf("parent %d not listed", os.Getppid())
	}
}
