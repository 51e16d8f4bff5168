package vm_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtpod/virtpod/tests/loopback"
	"github.com/virtpod/virtpod/tests/procstatus"
	"github.com/virtpod/virtpod/tests/promscrape"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// BenchmarkCreateVMs runs the real controller binary against the real API server, creates N
// VirtualMachines (VIRTPOD_BENCH_VMS, default 1000) and reports how long until every VM has its
// runner pod and status, the controller's API requests per VM, its CPU seconds and peak RSS, and
// its API requests per minute while every VM sits steady. With VIRTPOD_BENCH_NODES > 0 the pods
// are bound to that many simulated nodes and reported running (kubeapi.Kubelets), and a VM counts
// once its status says Running. Run with `make bench-controller` or `make bench-controller-5k`.
func BenchmarkCreateVMs(b *testing.B) {
	n, nodes := 1000, 0
	if s := os.Getenv("VIRTPOD_BENCH_VMS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("VIRTPOD_BENCH_NODES"); s != "" {
		nodes, _ = strconv.Atoi(s)
	}
	for range b.N {
		benchCreate(b, n, nodes)
	}
}

func benchCreate(b *testing.B, n, nodes int) {
	ctx := context.Background()
	dir := b.TempDir()
	bin := filepath.Join(dir, "virtpod-controller")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/virtpod-controller").CombinedOutput(); err != nil {
		b.Fatalf("building the controller: %v\n%s", err, out)
	}
	kubeconfig, err := env.Kubeconfig(dir)
	if err != nil {
		b.Fatal(err)
	}
	metricsAddr := loopback.FreeAddr(b)
	ctrlCmd := exec.Command(bin, "--leader-elect=false", "--metrics-bind-address="+metricsAddr,
		"--health-probe-bind-address=0", "--workers=8", "--kube-api-qps=1000", "--kube-api-burst=2000", "--zap-log-level=error")
	ctrlCmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	ctrlCmd.Stderr = os.Stderr
	if err := ctrlCmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ctrlCmd.Process.Kill(); _ = ctrlCmd.Wait() }()
	waitFor(b, "controller metrics endpoint", 30*time.Second, func() bool { _, err := requests(metricsAddr); return err == nil })

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	want := vmv1.PhaseScheduling
	if nodes > 0 {
		want = vmv1.PhaseRunning
		names := make([]string, nodes)
		for i := range names {
			names[i] = fmt.Sprintf("bench-node-%03d", i)
			if err := kubeapi.CreateNode(ctx, env.Client, names[i]); err != nil {
				b.Fatal(err)
			}
		}
		kctx, stop := context.WithCancel(ctx)
		defer stop()
		if _, err := kubeapi.StartKubelets(kctx, env.Config, ns.Name, names...); err != nil {
			b.Fatal(err)
		}
	}
	// Watch rather than poll: listing 1,000 VMs over and over would load the API server the
	// benchmark is measuring.
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	done := map[string]bool{}
	converged := func(vm *vmv1.VirtualMachine) {
		if vm.Status.PodUID != "" && vm.Status.Phase == want {
			done[vm.Name] = true
		}
	}
	// The server ends a watch now and then (and at once if it falls too far behind): list what
	// is done so far and watch on from there.
	watchFrom := func() watch.Interface {
		list := &vmv1.VirtualMachineList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ns.Name)); err != nil {
			b.Fatal(err)
		}
		for i := range list.Items {
			converged(&list.Items[i])
		}
		w, err := wc.Watch(ctx, &vmv1.VirtualMachineList{ListMeta: metav1.ListMeta{ResourceVersion: list.ResourceVersion}}, client.InNamespace(ns.Name))
		if err != nil {
			b.Fatal(err)
		}
		return w
	}
	w := watchFrom()
	defer func() { w.Stop() }()
	// VMs are pinned to their provider at admission once the controller has marked the default
	// class: wait for it, as a cluster that has been up a while would have.
	waitFor(b, "the qemu ProviderClass's status.default", 60*time.Second, func() bool {
		pc := &vmv1.ProviderClass{}
		return env.Client.Get(ctx, client.ObjectKey{Name: "qemu"}, pc) == nil && pc.Status.Default
	})
	apiPid, etcdPid, err := env.Pids()
	if err != nil {
		b.Fatal(err)
	}
	apiCPU0, etcdCPU0 := cpuOf(b, apiPid), cpuOf(b, etcdPid)
	served0 := served(b)
	before, _ := requests(metricsAddr)
	if out := os.Getenv("VIRTPOD_BENCH_APISERVER_PROFILE"); out != "" {
		go profileAPIServer(b, out, 10*time.Second)
	}
	start := time.Now()
	go createAll(b, ns.Name, n)
	timeout := time.After(max(10*time.Minute, time.Duration(n)*200*time.Millisecond))
	for len(done) < n {
		select {
		case ev, open := <-w.ResultChan():
			if vm, ok := ev.Object.(*vmv1.VirtualMachine); ok {
				converged(vm)
			} else if !open || ev.Type == watch.Error {
				w.Stop()
				w = watchFrom()
			}
		case <-timeout:
			b.Fatalf("only %d of %d VMs converged", len(done), n)
		}
	}
	elapsed := time.Since(start)
	time.Sleep(5 * time.Second) // let trailing reconciles finish; they count per VM
	after, _ := requests(metricsAddr)
	apiCPU1, etcdCPU1 := cpuOf(b, apiPid), cpuOf(b, etcdPid)
	served1 := served(b)
	if os.Getenv("VIRTPOD_BENCH_DEBUG") != "" {
		// What every encode, decode and watch event of a converged VM carries.
		cs, _ := kubernetes.NewForConfig(env.Config)
		raw, err := cs.RESTClient().Get().AbsPath("/apis", vmv1.GroupVersion.Group, vmv1.GroupVersion.Version,
			"namespaces", ns.Name, "virtualmachines", "vm-00000").DoRaw(ctx)
		fmt.Printf("a converged VM as stored (%d bytes, %v):\n%s\n", len(raw), err, raw)
		resp, _ := http.Get("http://" + metricsAddr + "/metrics")
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "rest_client_requests_total") {
				fmt.Println("converged:", sc.Text())
			}
		}
	}

	// Steady: nothing changes, so the controller should not talk to the API server at all.
	const idle = 30 * time.Second
	time.Sleep(idle)
	idleEnd, _ := requests(metricsAddr)
	apiCPU2 := cpuOf(b, apiPid)
	if os.Getenv("VIRTPOD_BENCH_DEBUG") != "" {
		resp, _ := http.Get("http://" + metricsAddr + "/metrics")
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "rest_client_requests_total") {
				fmt.Println(sc.Text())
			}
		}
	}
	cpu, rss := procStats(b, ctrlCmd.Process.Pid)

	perVM := float64(after-before) / float64(n)
	perMin := float64(idleEnd-after) * float64(time.Minute) / float64(idle)
	b.ReportMetric(elapsed.Seconds(), "s-to-converge")
	b.ReportMetric(perVM, "requests/VM")
	b.ReportMetric(cpu, "controller-cpu-s")
	b.ReportMetric(rss, "controller-peak-MiB")
	b.ReportMetric(perMin, "idle-requests/min")
	apiPerVM, etcdPerVM := (apiCPU1-apiCPU0)/float64(n), (etcdCPU1-etcdCPU0)/float64(n)
	b.ReportMetric(apiPerVM*1000, "apiserver-cpu-ms/VM")
	b.ReportMetric(etcdPerVM*1000, "etcd-cpu-ms/VM")
	fmt.Printf("\nVMs: %d, simulated nodes: %d\n", n, nodes)
	fmt.Printf("seconds until every VM has its runner pod and status (%s): %.1f\n", want, elapsed.Seconds())
	fmt.Printf("controller API requests per VM: %.2f\n", perVM)
	fmt.Printf("controller CPU seconds (whole run): %.1f\n", cpu)
	fmt.Printf("controller peak RSS: %.0f MiB\n", rss)
	fmt.Printf("controller API requests per minute with all VMs steady: %.1f\n", perMin)
	fmt.Printf("kube-apiserver CPU seconds (creates to convergence + 5 s): %.1f (%.1f ms per VM)\n", apiCPU1-apiCPU0, apiPerVM*1000)
	fmt.Printf("etcd CPU seconds (same span): %.1f (%.1f ms per VM)\n", etcdCPU1-etcdCPU0, etcdPerVM*1000)
	// The whole process's CPU, its start (CRDs, RBAC bootstrap, OpenAPI) and the test's earlier
	// work included: what a harness that reads only the process's total would divide by N.
	fmt.Printf("kube-apiserver CPU seconds since it started: %.1f (%.1f ms per VM), before the first create: %.1f\n", apiCPU1, apiCPU1/float64(n)*1000, apiCPU0)
	fmt.Printf("kube-apiserver CPU seconds per minute with all VMs steady: %.2f\n", (apiCPU2-apiCPU1)*float64(time.Minute)/float64(idle))
	fmt.Printf("requests the API server served per VM (every client, the benchmark's creates included):\n")
	for _, line := range servedPerVM(served0, served1, n) {
		fmt.Println("  " + line)
	}
}

// profileAPIServer writes a CPU profile of kube-apiserver taken over d to out, to see where
// its CPU goes per VM.
func profileAPIServer(b *testing.B, out string, d time.Duration) {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		b.Error(err)
		return
	}
	raw, err := cs.RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(int(d.Seconds()))).Timeout(d + 30*time.Second).DoRaw(context.Background())
	if err != nil {
		b.Error(err)
		return
	}
	if err := os.WriteFile(out, raw, 0o644); err != nil {
		b.Error(err)
	}
}

func cpuOf(b *testing.B, pid int) float64 {
	s, err := kubeapi.CPUSeconds(pid)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// served is the API server's own count of the requests it answered (apiserver_request_total),
// by verb, resource and subresource.
func served(b *testing.B) map[string]float64 {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(line[strings.IndexByte(line, '{')+1:strings.LastIndexByte(line, '}')], ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				labels[k] = strings.Trim(v, `"`)
			}
		}
		key := labels["verb"] + " " + labels["resource"]
		if labels["subresource"] != "" {
			key += "/" + labels["subresource"]
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		out[key] += v
	}
	return out
}

// servedPerVM lists what was served between two counts, per VM, most first, leaving out what
// came to less than one request per 100 VMs.
func servedPerVM(before, after map[string]float64, n int) []string {
	type row struct {
		key string
		per float64
	}
	var rows []row
	total := 0.0
	for k, v := range after {
		if per := (v - before[k]) / float64(n); per >= 0.01 {
			rows = append(rows, row{k, per})
			total += per
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		return rows[i].per > rows[j].per || rows[i].per == rows[j].per && rows[i].key < rows[j].key
	})
	lines := []string{fmt.Sprintf("%-40s %.2f", "total", total)}
	for _, r := range rows {
		lines = append(lines, fmt.Sprintf("%-40s %.2f", r.key, r.per))
	}
	return lines
}

// createAll creates n sample VMs in ns from 16 goroutines.
func createAll(b *testing.B, ns string, n int) {
	kubeapi.Parallel(b, n, func(i int) error {
		return env.Client.Create(context.Background(), kubeapi.SampleVM(ns, fmt.Sprintf("vm-%05d", i)))
	})
}

// requests is the controller's total API requests, from client-go's own metric.
func requests(addr string) (int, error) {
	m, err := promscrape.Sums(addr)
	return int(m["rest_client_requests_total"]), err
}

func procStats(b *testing.B, pid int) (cpuSeconds, peakMiB float64) {
	return cpuOf(b, pid), float64(procstatus.KiB(procstatus.Read(pid), "VmHWM")) / 1024
}

func waitFor(b *testing.B, what string, timeout time.Duration, ok func() bool) {
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
