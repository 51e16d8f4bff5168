package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// The stages of a VM's start, each measured from the end of the one before, from what the system
// already records, all on this machine's clock: the pod as a watch sees it, the local cluster's
// kubelet and containerd logs (the node is this machine), and the runner's log lines with the
// kubelet's timestamps. The pod's own conditions are not used for the node's steps: the kubelet
// reports them a status sync (up to a PLEG relist, 1 s) after the fact.
var stages = []string{
	"controller",     // apply -> the runner pod exists
	"scheduling",     // -> the pod is bound to the node
	"kubelet+mounts", // -> the kubelet mounted the pod's volumes (the image volumes' mount points included)
	"sandbox",        // -> containerd's RunPodSandbox returned: pause container, CNI network
	"container",      // -> the runner's first log line: image volumes, create and start the container
	"runner",         // -> "starting qemu": the runner prepared disks, network, firmware
	"hypervisor",     // -> "guest started": QEMU up, QMP connected, the guest resumed
	"guest boot",     // -> the guest's ready marker on its console
}

type timeline struct {
	applied, podAdded, scheduled, mounted, sandbox, running time.Time
	logs                                                    [4]time.Time // first line, starting qemu, guest started, marker
	// agentWait is how long the runner waited for the node agent to plumb the pod network
	// (its log's "waited"), a part of the "runner" stage.
	agentWait time.Duration
}

func (t timeline) points() []time.Time {
	return []time.Time{t.applied, t.podAdded, t.scheduled, t.mounted, t.sandbox, t.logs[0], t.logs[1], t.logs[2], t.logs[3]}
}

// tracker records, per VM, when a watch first saw each step of its pod and when its VM was first
// Running.
type tracker struct {
	mu    sync.Mutex
	lines map[string]*timeline
	stop  context.CancelFunc
}

func track(b *testing.B, ns string) *tracker {
	ctx, cancel := context.WithCancel(context.Background())
	tr := &tracker{lines: map[string]*timeline{}, stop: cancel}
	pw, err := kubeset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for ev := range pw.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			tr.mu.Lock()
			tl := tr.get(pod.Labels[podspec.LabelVMName])
			setOnce(&tl.podAdded, now)
			if pod.Spec.NodeName != "" {
				setOnce(&tl.scheduled, now)
			}
			tr.mu.Unlock()
		}
	}()
	go func() {
		for ctx.Err() == nil {
			var list vmv1.VirtualMachineList
			if err := kube.List(ctx, &list, client.InNamespace(ns)); err == nil {
				now := time.Now()
				tr.mu.Lock()
				for _, vm := range list.Items {
					if vm.Status.Phase == vmv1.PhaseRunning {
						setOnce(&tr.get(vm.Name).running, now)
					}
				}
				tr.mu.Unlock()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return tr
}

func (tr *tracker) get(vm string) *timeline {
	tl := tr.lines[vm]
	if tl == nil {
		tl = &timeline{}
		tr.lines[vm] = tl
	}
	return tl
}

func (tr *tracker) applied(vm string, at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.get(vm).applied = at
}

func setOnce(t *time.Time, now time.Time) {
	if t.IsZero() {
		*t = now
	}
}

// waitReady waits for each VM's guest marker and reads the runner's log timestamps.
func (tr *tracker) waitReady(b *testing.B, ns string, vms []string, timeout time.Duration) {
	eventually(b, fmt.Sprintf("%d guests ready", len(vms)), timeout, func() error {
		pending := 0
		for _, vm := range vms {
			tr.mu.Lock()
			done := !tr.get(vm).logs[3].IsZero()
			tr.mu.Unlock()
			if done {
				continue
			}
			logs, wait, ok := runnerLogTimes(ns, podspec.PodName(vm))
			if !ok {
				pending++
				continue
			}
			tr.mu.Lock()
			tr.get(vm).logs, tr.get(vm).agentWait = logs, wait
			tr.mu.Unlock()
		}
		if pending > 0 {
			return fmt.Errorf("%d of %d guests not ready", pending, len(vms))
		}
		return nil
	})
	// Running is seen by polling; give the last one a moment.
	eventually(b, "every VM Running", time.Minute, func() error {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, vm := range vms {
			if tr.get(vm).running.IsZero() {
				return fmt.Errorf("%s not Running yet", vm)
			}
		}
		return nil
	})
}

// runnerLogTimes returns the kubelet's timestamps of the runner's first log line, its "starting
// qemu" and "guest started" lines and the guest's marker, and how long it waited for the node
// agent's plumbing; ok once all are there.
func runnerLogTimes(ns, pod string) (out [4]time.Time, agentWait time.Duration, ok bool) {
	raw, err := kubeset.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Timestamps: true}).Do(context.Background()).Raw()
	if err != nil {
		return out, 0, false
	}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		ts, line, _ := strings.Cut(sc.Text(), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		setOnce(&out[0], at)
		switch {
		case strings.Contains(line, `"starting qemu"`):
			setOnce(&out[1], at)
		case strings.Contains(line, `"guest started"`):
			setOnce(&out[2], at)
		case strings.Contains(line, marker):
			setOnce(&out[3], at)
		case strings.Contains(line, `"pod network plumbed by the node agent"`):
			var l struct{ Waited float64 }
			if json.Unmarshal([]byte(line), &l) == nil {
				agentWait = time.Duration(l.Waited * float64(time.Second))
			}
		}
	}
	return out, agentWait, !out[3].IsZero() && !out[2].IsZero() && !out[1].IsZero()
}

// report prints p50/p95/max of apply -> Running, apply -> ready and each stage.
func (tr *tracker) report(b *testing.B, ns, label string, vms []string) {
	kubeletLog, containerdLog := nodeLogs(b)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var toRunning, toReady, runningLag, agentWait []time.Duration
	per := make([][]time.Duration, len(stages))
	for _, vm := range vms {
		tl := tr.get(vm)
		tl.mounted, tl.sandbox = nodeTimes(kubeletLog, containerdLog, ns, podspec.PodName(vm))
		toRunning = append(toRunning, tl.running.Sub(tl.applied))
		runningLag = append(runningLag, tl.running.Sub(tl.logs[2]))
		agentWait = append(agentWait, tl.agentWait)
		toReady = append(toReady, tl.logs[3].Sub(tl.applied))
		p := tl.points()
		for i := range stages {
			per[i] = append(per[i], p[i+1].Sub(p[i]))
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s, %d VMs:\n  %-22s %8s %8s %8s\n", label, len(vms), "step", "p50", "p95", "max")
	row := func(name string, d []time.Duration) {
		p50, p95, mx := quantiles(d)
		fmt.Fprintf(&sb, "  %-22s %8.2f %8.2f %8.2f\n", name, p50.Seconds(), p95.Seconds(), mx.Seconds())
	}
	row("apply -> Running", toRunning)
	row("apply -> guest ready", toReady)
	for i, s := range stages {
		row("  "+s, per[i])
		if s == "runner" {
			row("    of which node agent", agentWait)
		}
	}
	row("guest started -> Running", runningLag)
	// Whole on stderr too: go test cuts a benchmark's log after a few lines.
	fmt.Fprint(os.Stderr, sb.String())
	b.Log(sb.String())
	p50, p95, mx := quantiles(toReady)
	metric := strings.ReplaceAll(label, " ", "-")
	b.ReportMetric(p50.Seconds(), "s-p50-ready-"+metric)
	b.ReportMetric(p95.Seconds(), "s-p95-ready-"+metric)
	b.ReportMetric(mx.Seconds(), "s-max-ready-"+metric)
	p50, _, _ = quantiles(toRunning)
	b.ReportMetric(p50.Seconds(), "s-p50-running-"+metric)
	p50, _, _ = quantiles(agentWait)
	b.ReportMetric(p50.Seconds(), "s-p50-agent-"+metric)
}

// nodeLogs reads the local cluster's kubelet and containerd logs (localcluster keeps them beside
// the kubeconfig's folder).
func nodeLogs(b *testing.B) (kubelet, containerd []string) {
	dir := filepath.Join(filepath.Dir(filepath.Dir(os.Getenv("KUBECONFIG"))), "logs")
	read := func(name string) []string {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			b.Fatalf("the node's logs: %v", err)
		}
		return strings.Split(string(raw), "\n")
	}
	return read("kubelet.log"), read("containerd.log")
}

// nodeTimes finds when the kubelet last mounted one of the pod's volumes and when containerd's
// RunPodSandbox returned for it.
func nodeTimes(kubelet, containerd []string, ns, pod string) (mounted, sandbox time.Time) {
	year := time.Now().UTC().Year()
	podKey := fmt.Sprintf(`pod="%s/%s"`, ns, pod)
	for _, l := range kubelet {
		if !strings.Contains(l, "MountVolume.SetUp succeeded") || !strings.Contains(l, podKey) || len(l) < 21 {
			continue
		}
		// klog: I1201 02:09:44.991270 ... (UTC on this machine, no year)
		if at, err := time.Parse("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", year, l[1:21])); err == nil && at.After(mounted) {
			mounted = at
		}
	}
	sbKey := fmt.Sprintf(`RunPodSandbox for name:\"%s\"`, pod)
	nsKey := fmt.Sprintf(`namespace:\"%s\"`, ns)
	for _, l := range containerd {
		if !strings.Contains(l, sbKey) || !strings.Contains(l, nsKey) || !strings.Contains(l, "returns sandbox id") {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(l, `time="`), `"`)
		if at, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			sandbox = at
		}
	}
	return mounted, sandbox
}

func quantiles(d []time.Duration) (p50, p95, mx time.Duration) {
	if len(d) == 0 {
		return
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s)-1)+0.5))] }
	return at(0.5), at(0.95), s[len(s)-1]
}

func benchVMs() int {
	n, _ := strconv.Atoi(os.Getenv("VIRTPOD_BENCH_VMS"))
	return n
}

// smallVM is a small emulated test guest with the controller's default resources.
func smallVM(ns, name string) *vmv1.VirtualMachine {
	vm := newVM(ns, name)
	vm.Spec.PodResources = nil
	vm.Spec.Guest.Ports = nil
	return vm
}

// BenchmarkStart measures apply -> Running and apply -> the guest's ready marker for N small VMs
// (VIRTPOD_BENCH_VMS; default 20, or as many as the node holds by requests when that is fewer)
// applied at once and then one at a time, with the stages in between (see stages). make
// bench-start runs it.
func BenchmarkStart(b *testing.B) {
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		ns := namespace(b)
		n := benchVMs()
		if n == 0 {
			if n = nodeHolds(b, smallVM(ns, "probe")); n > 20 {
				n = 20
			}
		}
		tr := track(b, ns)
		names := make([]string, n)
		var wg sync.WaitGroup
		for j := range names {
			names[j] = fmt.Sprintf("at-once-%02d", j)
			wg.Add(1)
			go func() {
				defer wg.Done()
				tr.applied(names[j], time.Now())
				mustCreate(b, smallVM(ns, names[j]))
			}()
		}
		wg.Wait()
		tr.waitReady(b, ns, names, 10*time.Minute)
		tr.report(b, ns, "at once", names)
		deleteAllVMs(b, ns)

		seq := make([]string, n)
		for j := range seq {
			seq[j] = fmt.Sprintf("one-by-one-%02d", j)
			tr.applied(seq[j], time.Now())
			vm := smallVM(ns, seq[j])
			mustCreate(b, vm)
			tr.waitReady(b, ns, seq[j:j+1], 4*time.Minute)
			if err := kube.Delete(ctx, vm); err != nil {
				b.Fatal(err)
			}
			waitPodsGone(b, ns)
		}
		tr.report(b, ns, "one at a time", seq)
		tr.stop()
	}
}

func deleteAllVMs(b testing.TB, ns string) {
	if err := kube.DeleteAllOf(context.Background(), &vmv1.VirtualMachine{}, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	waitPodsGone(b, ns)
}

func waitPodsGone(b testing.TB, ns string) {
	eventually(b, "runner pods gone", 5*time.Minute, func() error {
		pods, err := kubeset.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left", len(pods.Items))
		}
		return nil
	})
}

// BenchmarkManyVMs boots as many small emulated guests as the node's free CPU and memory hold by
// their pods' requests (or VIRTPOD_BENCH_VMS), applied at once with kubectl apply as a user
// would: every one must reach Running and its guest its marker; the node agent and the device
// plugin must stay within their requests meanwhile. make bench-many runs it.
func BenchmarkManyVMs(b *testing.B) {
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		ns := namespace(b)
		n := benchVMs()
		if n == 0 {
			n = nodeHolds(b, smallVM(ns, "probe"))
		}
		if n < 10 {
			b.Errorf("the node holds only %d small VMs by their requests, fewer than 10", n)
		}
		var manifest strings.Builder
		names := make([]string, n)
		for j := range names {
			names[j] = fmt.Sprintf("many-%02d", j)
			vm := smallVM(ns, names[j])
			vm.APIVersion, vm.Kind = vmv1.GroupVersion.String(), "VirtualMachine"
			y, err := yaml.Marshal(vm)
			if err != nil {
				b.Fatal(err)
			}
			manifest.WriteString("---\n")
			manifest.Write(y)
		}
		file := filepath.Join(b.TempDir(), "vms.yaml")
		if err := os.WriteFile(file, []byte(manifest.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		tr := track(b, ns)
		watchers := watchDaemons(b, ctx)
		start := time.Now()
		if out, err := exec.Command(kubectl, "apply", "-f", file).CombinedOutput(); err != nil {
			b.Fatalf("kubectl apply: %v\n%s", err, out)
		}
		for _, name := range names {
			tr.applied(name, start)
		}
		tr.waitReady(b, ns, names, 15*time.Minute)
		var lastRunning, lastReady time.Time
		tr.mu.Lock()
		for _, name := range names {
			tl := tr.get(name)
			lastRunning = later(lastRunning, tl.running)
			lastReady = later(lastReady, tl.logs[3])
		}
		tr.mu.Unlock()
		b.Logf("%d VMs applied at once: all Running after %.1f s, all guests ready after %.1f s",
			n, lastRunning.Sub(start).Seconds(), lastReady.Sub(start).Seconds())
		b.ReportMetric(float64(n), "VMs")
		b.ReportMetric(lastRunning.Sub(start).Seconds(), "s-all-running")
		b.ReportMetric(lastReady.Sub(start).Seconds(), "s-all-ready")
		tr.report(b, ns, "many at once", names)
		for _, w := range watchers {
			w.check(b)
		}
		tr.stop()
		deleteAllVMs(b, ns)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// nodeHolds is how many more pods like vm's the node's free allocatable CPU and memory hold by
// requests, the way the scheduler counts.
func nodeHolds(b testing.TB, vm *vmv1.VirtualMachine) int {
	ctx := context.Background()
	nodes, err := kubeset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		b.Fatalf("want the local cluster's one node: %v", err)
	}
	node := nodes.Items[0]
	freeCPU, freeMem := node.Status.Allocatable.Cpu().MilliValue(), node.Status.Allocatable.Memory().Value()
	pods, err := kubeset.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range pods.Items {
		if podEnded(&p) {
			continue
		}
		for _, c := range p.Spec.Containers {
			freeCPU -= c.Resources.Requests.Cpu().MilliValue()
			freeMem -= c.Resources.Requests.Memory().Value()
		}
	}
	var class vmv1.ProviderClass
	opts := podspec.DefaultOptions()
	if err := kube.Get(ctx, client.ObjectKey{Name: string(vmv1.ProviderQEMU)}, &class); err == nil {
		opts.Class = &class
	}
	req := podspec.Build(vm, opts).Spec.Containers[0].Resources.Requests
	n := min(freeCPU/req.Cpu().MilliValue(), freeMem/req.Memory().Value())
	b.Logf("node %s: %dm CPU and %d MiB free by requests; a small VM's pod requests %s CPU, %s memory: %d fit",
		node.Name, freeCPU, freeMem>>20, req.Cpu(), req.Memory(), n)
	return int(n)
}

func podEnded(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// daemonWatch samples one virtpod DaemonSet pod's cgroup: peak working set and CPU used over the
// run, against its container's requests.
type daemonWatch struct {
	name            string
	reqCPU, reqMem  int64 // millicores, bytes
	peakMem         int64
	cpu0, cpu1      time.Duration
	t0, t1          time.Time
	memDir, cpuDir  string
	done            chan struct{}
	stopped         chan struct{}
	peakCPUMilli    float64
	lastCPU, lastAt time.Time
}

func watchDaemons(b *testing.B, ctx context.Context) []*daemonWatch {
	var out []*daemonWatch
	for _, ds := range []string{"virtpod-agent", "virtpod-device-plugin"} {
		pods, err := kubeset.CoreV1().Pods("virtpod-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + ds})
		if err != nil || len(pods.Items) != 1 {
			b.Fatalf("want one %s pod: %v", ds, err)
		}
		p := pods.Items[0]
		w := &daemonWatch{name: ds, done: make(chan struct{}), stopped: make(chan struct{})}
		for _, c := range p.Spec.Containers {
			w.reqCPU += c.Resources.Requests.Cpu().MilliValue()
			w.reqMem += c.Resources.Requests.Memory().Value()
		}
		if w.memDir, err = podCgroup("memory", p.UID); err != nil {
			b.Fatal(err)
		}
		if w.cpuDir, err = podCgroup("cpuacct", p.UID); err != nil {
			b.Fatal(err)
		}
		w.cpu0, _ = cgroupCPU(w.cpuDir)
		w.t0 = time.Now()
		go w.sample()
		out = append(out, w)
	}
	return out
}

func (w *daemonWatch) sample() {
	defer close(w.stopped)
	prevCPU, prevAt := w.cpu0, w.t0
	for {
		select {
		case <-w.done:
			return
		case <-time.After(2 * time.Second):
		}
		if m, err := readCgroupMem(w.memDir); err == nil {
			w.peakMem = max(w.peakMem, m.WorkingSet)
		}
		if c, err := cgroupCPU(w.cpuDir); err == nil {
			now := time.Now()
			w.peakCPUMilli = max(w.peakCPUMilli, float64(c-prevCPU)/float64(now.Sub(prevAt))*1000)
			prevCPU, prevAt = c, now
		}
	}
}

func (w *daemonWatch) check(b *testing.B) {
	close(w.done)
	<-w.stopped
	w.cpu1, _ = cgroupCPU(w.cpuDir)
	w.t1 = time.Now()
	avg := float64(w.cpu1-w.cpu0) / float64(w.t1.Sub(w.t0)) * 1000
	b.Logf("%s: CPU %.1f millicores on average (peak %.1f over 2 s) of %d requested; peak working set %.1f MiB of %d MiB requested",
		w.name, avg, w.peakCPUMilli, w.reqCPU, mib(w.peakMem), w.reqMem>>20)
	if avg > float64(w.reqCPU) || w.peakMem > w.reqMem {
		b.Errorf("%s went beyond its requests", w.name)
	}
}
