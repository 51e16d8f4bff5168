package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/churn"
	"github.com/virtpod/virtpod/tests/heapprof"
	"github.com/virtpod/virtpod/tests/promscrape"
)

// BenchmarkNodeSoak churns VMs on the local cluster's node for VIRTPOD_SOAK_MINUTES (10 by
// default; `make soak-node`): 8 slots, an action every 2 s on a random one — create (pod or
// masquerade network, half with an empty disk), stop, start, restart request, migrate within the
// node, delete. Before and after (every VM deleted, every runner pod gone) it reads what the node
// side leaves: files in the runner control directories, network namespaces, the host's links and
// nftables tables, hypervisor and runner processes, and the node agent's heap, goroutines and
// open file descriptors (the agent restarted with its profiling endpoint for it, and put back
// after). It fails on anything left over, or on the agent's heap or goroutines more than 10%
// over a baseline taken after a warm-up churn (its heap: live bytes after two forced
// collections).
func BenchmarkNodeSoak(b *testing.B) {
	minutes := churn.Minutes(b)
	ctx := context.Background()
	const slots = 8
	ns := namespace(b)
	node := onlyNode(b)
	agent := profiledAgent(b)
	start := time.Now()
	empty := readNodeSide(b, agent, start)

	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	gen := make([]int, slots)
	name := func(i int) string { return fmt.Sprintf("soak-%d-%d", i, gen[i]) }
	actions, migrations := map[string]int{}, 0
	patch := func(vm *vmv1.VirtualMachine, body string) {
		if err := kube.Patch(ctx, vm, client.RawPatch(types.MergePatchType, []byte(body))); err != nil && !apierrors.IsNotFound(err) {
			b.Errorf("patch %s: %v", vm.Name, err)
		}
	}
	act := func(i int) {
		vm := &vmv1.VirtualMachine{}
		err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: name(i)}, vm)
		switch {
		case apierrors.IsNotFound(err):
			vm = smallVM(ns, name(i))
			if rnd.IntN(2) == 0 {
				vm.Spec.Guest.NetworkMode = vmv1.NetworkMasquerade
			}
			if rnd.IntN(2) == 0 {
				vm.Spec.Guest.Disks = []vmv1.Disk{{Name: "scratch", EmptyDisk: &vmv1.EmptyDiskSource{Size: resource.MustParse("16Mi")}}}
			}
			mustCreate(b, vm)
			actions["create"]++
			return
		case err != nil:
			b.Fatal(err)
		case vm.DeletionTimestamp != nil:
			return
		}
		what := churn.Next(rnd, vm.Spec.Halted())
		switch {
		case what == churn.Delete:
			if err := kube.Delete(ctx, vm); err != nil && !apierrors.IsNotFound(err) {
				b.Errorf("delete %s: %v", vm.Name, err)
			}
			gen[i]++
		case what != churn.Own:
			patch(vm, churn.Patch(what))
		case rnd.IntN(2) == 0 && vm.Status.Phase == vmv1.PhaseRunning:
			what = "migrate"
			migrations++
			mig := &vmv1.VirtualMachineMigration{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-m%d", vm.Name, migrations)},
				Spec:       vmv1.VirtualMachineMigrationSpec{VMName: vm.Name, TargetNode: node},
			}
			if err := kube.Create(ctx, mig); err != nil {
				b.Errorf("migrate %s: %v", vm.Name, err)
			}
		default:
			what = "wait"
		}
		actions[string(what)]++
	}
	churnFor := func(d time.Duration) {
		for i := range slots {
			act(i)
		}
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(2 * time.Second) {
			act(rnd.IntN(slots))
		}
	}
	// A warm-up first, every VM deleted after it: the baseline is an agent that has done each
	// kind of work once (its lazily built caches: JSON encoders, gzip writers), with nothing
	// left to do, as at the end.
	warm := min(2*time.Minute, time.Duration(minutes*float64(time.Minute))/5)
	churnFor(warm)
	deleteAllVMs(b, ns)
	base := readNodeSide(b, agent, start)
	b.Logf("baseline (after a %v warm-up): %s", warm, base)
	churnFor(time.Duration(minutes * float64(time.Minute)))
	var migs vmv1.VirtualMachineMigrationList
	if err := kube.List(ctx, &migs, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	phases := map[string]int{}
	for _, m := range migs.Items {
		key := string(m.Status.Phase)
		if c := meta.FindStatusCondition(m.Status.Conditions, "Completed"); c != nil {
			key += "/" + c.Reason
		}
		phases[key]++
	}
	deleteAllVMs(b, ns)
	if err := kube.DeleteAllOf(ctx, &vmv1.VirtualMachineMigration{}, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	end := readNodeSide(b, agent, start)
	b.Logf("soak: %.1f minutes on node %s, actions %v, migrations by phase %v", minutes, node, actions, phases)
	b.Logf("before any VM:  %s", empty)
	b.Logf("baseline:       %s", base)
	b.Logf("end:            %s", end)
	problems := append(empty.compareCounts(end), base.compareAgent(end)...)
	for _, p := range problems {
		b.Error(p)
	}
	if len(problems) > 0 {
		agentHeapTop(b, agent)
	}
}

// nodeSide is what the node holds for VMs, outside the pods themselves.
type nodeSide struct {
	controlFiles                                                         int // files and sockets in the control directories, made during the run
	netns, links, nftTables, hypervisors, runners                        int
	agentHeapMiB, agentHeapInuseMiB, agentGoroutines, agentFDs, agentRSS float64
}

func (n nodeSide) String() string {
	return fmt.Sprintf("control files %d, netns %d, host links %d, host nftables tables %d, QEMU %d, runners %d; agent heap %.1f MiB live (%.1f MiB in use), goroutines %.0f, fds %.0f, RSS %.1f MiB",
		n.controlFiles, n.netns, n.links, n.nftTables, n.hypervisors, n.runners, n.agentHeapMiB, n.agentHeapInuseMiB, n.agentGoroutines, n.agentFDs, n.agentRSS)
}

// compareCounts lists what end holds beyond base: files, namespaces, links, tables, processes.
func (base nodeSide) compareCounts(end nodeSide) []string {
	var p []string
	counts := []struct {
		what      string
		base, end int
	}{
		{"files in the control directories", base.controlFiles, end.controlFiles},
		{"network namespaces", base.netns, end.netns},
		{"host links", base.links, end.links},
		{"host nftables tables", base.nftTables, end.nftTables},
		{"QEMU processes", base.hypervisors, end.hypervisors},
		{"runner processes", base.runners, end.runners},
	}
	for _, c := range counts {
		if c.end > c.base {
			p = append(p, fmt.Sprintf("%s: %d at the end, %d before: left behind", c.what, c.end, c.base))
		}
	}
	return p
}

// compareAgent lists how the agent at end exceeds base: its heap or goroutines by more than
// 10%, its open file descriptors by more than 2.
func (base nodeSide) compareAgent(end nodeSide) []string {
	var p []string
	if end.agentHeapMiB > base.agentHeapMiB*1.1 {
		p = append(p, fmt.Sprintf("the agent's live heap: %.1f MiB at the end, %.1f MiB before", end.agentHeapMiB, base.agentHeapMiB))
	}
	if end.agentGoroutines > base.agentGoroutines*1.1 {
		p = append(p, fmt.Sprintf("the agent's goroutines: %.0f at the end, %.0f before", end.agentGoroutines, base.agentGoroutines))
	}
	if end.agentFDs > base.agentFDs+2 {
		p = append(p, fmt.Sprintf("the agent's open file descriptors: %.0f at the end, %.0f before", end.agentFDs, base.agentFDs))
	}
	return p
}

// readNodeSide waits until no runner pod is left on the node, then reads the node side. The
// agent's heap is read after two collections (its profiling endpoint's gc=1): one leaves what
// sync.Pools hold for the next. Files count only if made since then.
func readNodeSide(b *testing.B, agent string, since time.Time) nodeSide {
	ctx := context.Background()
	eventually(b, "no runner pod on the node", 5*time.Minute, func() error {
		pods, err := kubeset.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: vmv1.LabelManagedBy + "=" + vmv1.ManagedBy})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d runner pods, the first %s/%s", len(pods.Items), pods.Items[0].Namespace, pods.Items[0].Name)
		}
		return nil
	})
	var n nodeSide
	// The lowest of three readings 10 s apart: a collection keeps what is in flight (the
	// agent's heartbeat probe, an API watch event), which is not the agent's to keep.
	for i := range 3 {
		if i > 0 {
			time.Sleep(10 * time.Second)
		}
		if err := heapprof.Collect(agent + ":6060"); err != nil {
			b.Fatalf("the agent's profiling endpoint: %v", err)
		}
		m, err := promscrape.Sums(agent + ":9441")
		if err != nil {
			b.Fatalf("the agent's metrics: %v", err)
		}
		// Live bytes right after a collection: the heap in use also counts the free room in
		// spans that still hold a live object, which a churn fragments.
		if heap := m["go_memstats_heap_alloc_bytes"] / (1 << 20); i == 0 || heap < n.agentHeapMiB {
			n.agentHeapMiB = heap
			n.agentHeapInuseMiB = m["go_memstats_heap_inuse_bytes"] / (1 << 20)
			n.agentGoroutines = m["go_goroutines"]
			n.agentFDs = m["process_open_fds"]
			n.agentRSS = m["process_resident_memory_bytes"] / (1 << 20)
		}
	}
	n.controlFiles = countFiles(b, vmv1.HostControlDir, since)
	// Pods' network namespaces are bind mounts under containerd's state directory, one per
	// sandbox (the local cluster's containerd keeps them there, not in /run/netns).
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.Contains(f[4], "/netns/") {
			n.netns++
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		b.Fatal(err)
	}
	n.links = len(links)
	conn, err := nftables.New()
	if err != nil {
		b.Fatal(err)
	}
	tables, err := conn.ListTables()
	if err != nil {
		b.Fatal(err)
	}
	n.nftTables = len(tables)
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		comm, err := os.ReadFile(filepath.Join("/proc", p.Name(), "comm"))
		if err != nil {
			continue
		}
		switch c := strings.TrimSpace(string(comm)); {
		case strings.HasPrefix(c, "qemu-system"):
			n.hypervisors++
		case c == "virtpod-runner":
			n.runners++
		}
	}
	return n
}

// profiledAgent restarts the node agent with its profiling endpoint on (port 6060 of its pod
// IP, which the node reaches) and returns that IP; the agent is put back as installed after b.
func profiledAgent(b *testing.B) string {
	ctx := context.Background()
	ds := kubeset.AppsV1().DaemonSets("virtpod-system")
	patch := `[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--pprof-addr=:6060"}]`
	if _, err := ds.Patch(ctx, "virtpod-agent", types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		d, err := ds.Get(ctx, "virtpod-agent", metav1.GetOptions{})
		if err != nil {
			b.Error(err)
			return
		}
		args := d.Spec.Template.Spec.Containers[0].Args
		d.Spec.Template.Spec.Containers[0].Args = slices.DeleteFunc(args, func(a string) bool { return a == "--pprof-addr=:6060" })
		if _, err := ds.Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			b.Error(err)
		}
	})
	var ip string
	eventually(b, "the node agent restarted with its profiling endpoint", 3*time.Minute, func() error {
		pods, err := kubeset.CoreV1().Pods("virtpod-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=virtpod-agent"})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && slices.Contains(p.Spec.Containers[0].Args, "--pprof-addr=:6060") && p.Status.PodIP != "" {
				if _, err := httpGet("http://" + p.Status.PodIP + ":6060/debug/pprof/"); err != nil {
					return err
				}
				ip = p.Status.PodIP
				return nil
			}
		}
		return fmt.Errorf("no agent pod with --pprof-addr yet")
	})
	return ip
}

// agentHeapTop prints the largest in-use allocation sites of the agent's heap.
func agentHeapTop(b *testing.B, agent string) {
	top, file, err := heapprof.Top(agent + ":6060")
	if err != nil {
		b.Error(err)
		return
	}
	b.Logf("the agent's heap at the end (profile kept in %s):\n%s", file, top)
}

func httpGet(url string) ([]byte, error) {
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// countFiles counts what is not a directory under dir and was made since then: what an
// earlier run left is not this run's (the device plugin empties a directory when it hands it
// to the next pod).
func countFiles(b *testing.B, dir string, since time.Time) int {
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if info, err := d.Info(); err == nil && info.ModTime().After(since) {
			n++
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		b.Fatal(err)
	}
	return n
}

// onlyNode is the local cluster's one node.
func onlyNode(b *testing.B) string {
	nodes, err := kubeset.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		b.Fatalf("want the local cluster's one node: %v", err)
	}
	return nodes.Items[0].Name
}
