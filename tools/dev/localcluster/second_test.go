package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the tests run node-exec as node-up does: the test binary stands in for the tool.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "node-exec" {
		cmd := nodeExecCommand()
		cmd.SetArgs(os.Args[2:])
		if err := cmd.Execute(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// section returns the TOML table header a key is set under.
func section(t *testing.T, body, key string) string {
	t.Helper()
	table := ""
	for _, line := range strings.Split(body, "\n") {
		l := strings.TrimSpace(line)
		if strings.HasPrefix(l, "[") {
			table = l
		}
		if strings.HasPrefix(l, key+" ") {
			return table
		}
	}
	t.Fatalf("%s not set in:\n%s", key, body)
	return ""
}

// TestSecondNodeConfigs: the second node's containerd, CNI, kubelet and kube-proxy settings name
// its own state, socket, bridge, range, cgroup root and folders, and nothing of the first node's
// but the registry and the API server.
func TestSecondNodeConfigs(t *testing.T) {
	c := testCluster(t, nil)
	n := c.second()
	n.nodeName = "virtpod-node-2"
	ctrd, err := n.containerdConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.cniConfig(); err != nil {
		t.Fatal(err)
	}
	kubelet, err := n.kubeletConfig()
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := n.kubeProxyConfig(n.path("kubeconfig", "kube-proxy.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	files := map[string]string{
		"containerd": read(ctrd), "cni": read(n.path("cni", "net.d", "10-virtpod.conflist")),
		"kubelet": read(kubelet), "kube-proxy": read(proxy),
		"hosts": read(n.path("config", "containerd-hosts", "localhost", "hosts.toml")),
	}
	for what, body := range files {
		for _, first := range []string{containerdState + "/", containerdState + `"`, `"` + podBridge + `"`, podCIDR, c.path("containerd"), c.path("kubelet"), c.path("cni"), c.path("pki"), c.path("pod-logs")} {
			if strings.Contains(body, first) {
				t.Errorf("%s config names the first node's %s:\n%s", what, first, body)
			}
		}
	}
	for what, want := range map[string][]string{
		"containerd": {`state = "` + secondState + `"`, `address = "` + secondState + `/containerd.sock"`, n.path("containerd", "root"),
			`sandbox = "10.217.0.1:5000/virtpod/pause:3.10"`, `socket_path = "` + secondState + `/nri.sock"`, `Root = "` + secondState + `/runc"`},
		"cni":        {`"bridge": "vpcni2"`, `"subnet": "10.218.1.0/24"`, `"ipMasq": false`},
		"kubelet":    {"cgroupRoot: /vpnode2", "unix://" + secondState + "/containerd.sock", n.path("pki", "kubelet-serving.crt"), n.path("pod-logs")},
		"kube-proxy": {"hostnameOverride: virtpod-node-2", "clusterCIDR: " + clusterCIDR},
		"hosts":      {`server = "http://10.217.0.1:5000"`},
	} {
		if err := containsAll(files[what], want...); err != nil {
			t.Errorf("%s config: %v", what, err)
		}
	}
	// Settings in the wrong TOML table are ignored without a word: check where they landed.
	for key, table := range map[string]string{
		"netns_mounts_under_state_dir": "[plugins.'io.containerd.cri.v1.runtime']",
		"socket_path":                  "[plugins.'io.containerd.nri.v1.nri']",
		"Root":                         "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]",
	} {
		if got := section(t, files["containerd"], key); got != table {
			t.Errorf("containerd %s under %s, want %s", key, got, table)
		}
	}

	// The first node keeps the host's defaults, but for its pods' network namespaces, which
	// stay out of /run/netns (configs.go says why).
	first, err := c.containerdConfig()
	if err != nil {
		t.Fatal(err)
	}
	if body := read(first); strings.Contains(body, "nri") || strings.Contains(body, secondState) {
		t.Errorf("first node's containerd config has second-node settings:\n%s", body)
	} else if got := section(t, body, "netns_mounts_under_state_dir"); got != "[plugins.'io.containerd.cri.v1.runtime']" {
		t.Errorf("first node's netns_mounts_under_state_dir under %s", got)
	}
	k1, err := c.kubeletConfig()
	if err != nil {
		t.Fatal(err)
	}
	if body := read(k1); strings.Contains(body, "cgroupRoot") {
		t.Errorf("first node's kubelet has a cgroup root:\n%s", body)
	}
}

func containsAll(s string, parts ...string) error {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return &missing{p}
		}
	}
	return nil
}

type missing struct{ s string }

func (m *missing) Error() string { return strconv.Quote(m.s) + " missing" }

// TestOwnedSecondNode: the second node's components (by its pid files) and the shims on its
// containerd's socket are the second node's; the first node's shims are not.
func TestOwnedSecondNode(t *testing.T) {
	c := testCluster(t, nil)
	n := c.second()
	if err := writeFile(n.path("pids", "kubelet.pid"), "500", 0o644); err != nil {
		t.Fatal(err)
	}
	procs := []proc{
		{500, []string{c.binFor("kubelet"), "--root-dir=" + n.path("kubelet")}},
		{501, []string{c.binFor("containerd"), "--config=" + n.path("config", "containerd.toml")}},
		{502, []string{filepath.Join(c.ctrdBin, "containerd-shim-runc-v2"), "-id", "x", "-address", secondState + "/containerd.sock"}},
		{503, []string{filepath.Join(c.ctrdBin, "containerd-shim-runc-v2"), "-id", "y", "-address", containerdState + "/containerd.sock"}},
	}
	got := n.owned(procs, n.pidFiles())
	want := map[int]string{
		500: "kubelet (pid file)",
		501: "containerd (its pid file is gone)",
		502: "on " + secondState + "/containerd.sock",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("owned:\n got %v\nwant %v", got, want)
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (namespaces and mounts)")
		}
		t.Skip("needs root (namespaces and mounts)")
	}
}

// TestNodeExecNamespaces runs node-exec for real: a process in a new mount namespace sees a
// folder bound over another, the host does not; a second process joining that namespace (as the
// kubelet joins containerd's) sees it too; and a process put into a network namespace is in it.
func TestNodeExecNamespaces(t *testing.T) {
	needRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "node"), filepath.Join(dir, "host")
	for d, body := range map[string]string{src: "node's", dst: "host's"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "f"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The holder: as containerd, in a new mount namespace with the bind.
	holder := exec.Command(self, "node-exec", "--new-mount-ns", "--bind="+src+":"+dst, "--", "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	ns := "/proc/" + strconv.Itoa(holder.Process.Pid) + "/ns/mnt"
	deadline := time.Now().Add(10 * time.Second)
	for {
		mine, _ := os.Readlink("/proc/self/ns/mnt")
		its, _ := os.Readlink(ns)
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(holder.Process.Pid) + "/cmdline")
		if its != "" && its != mine && strings.HasPrefix(string(cmdline), "sleep") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-exec did not become sleep in a mount namespace of its own (%q, %s vs %s)", cmdline, its, mine)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "f")); string(b) != "host's" {
		t.Errorf("the host sees %q in %s: the bind leaked out of the node's mount namespace", b, dst)
	}
	if len(mountsUnder(dst)) != 0 {
		t.Errorf("the host has a mount at %s", dst)
	}
	out, err := exec.Command(self, "node-exec", "--mount-ns="+ns, "--", "cat", filepath.Join(dst, "f")).CombinedOutput()
	if err != nil || string(out) != "node's" {
		t.Errorf("a process joining the node's mount namespace reads %q (%v), want the node's folder", out, err)
	}

	// A network namespace of its own, joined.
	name := "vptest" + strconv.Itoa(os.Getpid())
	h, err := openOrMakeNetns(name)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	t.Cleanup(func() { unmountUnder(netnsPath(name)); _ = os.Remove(netnsPath(name)) })
	want, err := os.Stat(netnsPath(name))
	if err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(self, "node-exec", "--netns="+netnsPath(name), "--", "readlink", "/proc/self/ns/net").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "net:["+strconv.FormatUint(inode(want), 10)+"]" {
		t.Errorf("node-exec --netns ran in %s, want the namespace pinned at %s (inode %d)", got, netnsPath(name), inode(want))
	}
	host, _ := os.Readlink("/proc/self/ns/net")
	if host == strings.TrimSpace(string(out)) {
		t.Errorf("node-exec --netns stayed in the host's network namespace")
	}
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// TestSecondLeftoversState: whatever is left in the second node's folder counts but its logs;
// its name counts unless the node was stopped with its Node object kept.
func TestSecondLeftoversState(t *testing.T) {
	c := testCluster(t, nil)
	n := c.second()
	for _, d := range []string{"kubelet/pods", "containerd/root", "logs"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeFile(n.path("name"), "virtpod-node-2\n", 0o644); err != nil {
		t.Fatal(err)
	}
	ours := func(keepName bool) []string {
		var got []string
		for _, l := range c.secondLeftovers(keepName) {
			if strings.Contains(l, n.dir) {
				got = append(got, l)
			}
		}
		return got
	}
	want := []string{"left: " + n.path("containerd"), "left: " + n.path("kubelet"), "left: " + n.path("name")}
	if got := ours(false); !reflect.DeepEqual(got, want) {
		t.Errorf("leftovers:\n got %q\nwant %q", got, want)
	}
	if got := ours(true); !reflect.DeepEqual(got, want[:2]) {
		t.Errorf("leftovers with the node kept:\n got %q\nwant %q", got, want[:2])
	}
}

// TestSharedNetnsDir: /run/netns ends as a shared mount of its own, so a later `ip netns add`
// never bind-mounts it over what the cluster pinned there; a second call changes nothing.
func TestSharedNetnsDir(t *testing.T) {
	needRoot(t)
	for range 2 {
		if err := sharedNetnsDir(); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 6 && f[4] == "/run/netns" {
			n++
			if !strings.Contains(line, " shared:") {
				t.Errorf("/run/netns is not shared: %s", line)
			}
		}
	}
	if n != 1 {
		t.Errorf("/run/netns is mounted %d times, want once", n)
	}
}
