// Package sidebyside measures virtpod's controller against NeonVM's on the same work: each run
// gets its own fresh kube-apiserver and etcd, the controller under test as its own process with
// matched workers and client QPS, and 1,000 VMs created from 16 goroutines. A run ends when every
// VM's status names a runner pod that exists. Run with `make bench-sidebyside`.
package sidebyside

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/virtpod/virtpod/tests/kubeapi"
	"github.com/virtpod/virtpod/tests/procstatus"
	"github.com/virtpod/virtpod/tests/promscrape"
)

// contender is one controller as the benchmark drives it.
type contender interface {
	name() string
	// start installs what the controller needs (admission, CRDs, certificates) into a fresh
	// control plane and starts it as its own process with kubeconfig, returning the process and
	// its metrics address once it serves them.
	start(b *testing.B, env *kubeapi.Env, kubeconfig string) (*exec.Cmd, string)
	vmResource() schema.GroupVersionResource
	// vm is the i-th VirtualMachine to create in ns: 1 CPU, 256 MiB.
	vm(ns string, i int) *unstructured.Unstructured
	// podOf says which runner pod a VM's status names once the controller has done its part.
	podOf(vm *unstructured.Unstructured) (string, bool)
}

type result struct {
	seconds     float64 // first create to the last VM converged
	requests    float64 // the controller's own API requests per VM
	apiMs       float64 // kube-apiserver CPU per VM, first create to convergence + 5 s
	apiLifeMs   float64 // kube-apiserver CPU since it started, per VM
	etcdMs      float64 // etcd CPU per VM, same span as apiMs
	ctrlCPU     float64 // the controller's CPU seconds, its whole life
	ctrlPeakMiB float64
}

// BenchmarkSideBySide runs VIRTPOD_BENCH_PAIRS (default 3) pairs of runs, virtpod and NeonVM,
// alternating which goes first, each with VIRTPOD_BENCH_VMS VMs (default 1000), and prints every
// run and the medians' ratios.
func BenchmarkSideBySide(b *testing.B) {
	n, pairs := envInt("VIRTPOD_BENCH_VMS", 1000), envInt("VIRTPOD_BENCH_PAIRS", 3)
	if os.Getenv("TEST_ASSET_KUBE_APISERVER") == "" {
		b.Fatal("TEST_ASSET_KUBE_APISERVER is not set: run `make bench-sidebyside`, which builds kube-apiserver and etcd")
	}
	ctrllog.SetLogger(logr.Discard()) // envtest's own start-up lines
	dir := b.TempDir()
	neon, crds := newNeonVM(b, dir)
	contenders := []contender{newVirtpod(b, dir), neon}
	if only := os.Getenv("VIRTPOD_BENCH_ONLY"); only != "" { // one side, to look into it
		contenders = slices.DeleteFunc(contenders, func(c contender) bool { return c.name() != only })
	}
	runs := map[string][]result{}
	for range b.N {
		for p := range pairs {
			order := slices.Clone(contenders)
			if p%2 == 1 {
				slices.Reverse(order)
			}
			for _, c := range order {
				r := run(b, c, n, crds)
				runs[c.name()] = append(runs[c.name()], r)
				fmt.Printf("pair %d %-8s %5.1f s  %6.1f VMs/s  %4.2f requests/VM  apiserver %5.1f ms/VM (whole life %5.1f)  etcd %4.1f ms/VM  controller %4.1f CPU-s %3.0f MiB\n",
					p+1, c.name(), r.seconds, float64(n)/r.seconds, r.requests, r.apiMs, r.apiLifeMs, r.etcdMs, r.ctrlCPU, r.ctrlPeakMiB)
			}
		}
	}
	if len(runs["virtpod"]) == 0 || len(runs["neonvm"]) == 0 {
		return
	}
	v, nv := median(runs["virtpod"]), median(runs["neonvm"])
	fmt.Printf("\nmedians over %d pairs, %d VMs each:\n", pairs, n)
	fmt.Printf("  %-34s %10s %10s %8s\n", "", "virtpod", "neonvm", "ratio")
	for _, row := range []struct {
		what   string
		v, nv  float64
		higher bool // higher is better
	}{
		{"VMs per second", float64(n) / v.seconds, float64(n) / nv.seconds, true},
		{"controller requests per VM", v.requests, nv.requests, false},
		{"kube-apiserver CPU ms per VM", v.apiMs, nv.apiMs, false},
		{"  the same, its whole life", v.apiLifeMs, nv.apiLifeMs, false},
		{"etcd CPU ms per VM", v.etcdMs, nv.etcdMs, false},
		{"controller CPU seconds", v.ctrlCPU, nv.ctrlCPU, false},
		{"controller peak RSS MiB", v.ctrlPeakMiB, nv.ctrlPeakMiB, false},
	} {
		ratio := row.nv / row.v
		if row.higher {
			ratio = row.v / row.nv
		}
		fmt.Printf("  %-34s %10.2f %10.2f %7.2fx\n", row.what, row.v, row.nv, ratio)
	}
	b.ReportMetric(v.apiMs, "virtpod-apiserver-ms/VM")
	b.ReportMetric(nv.apiMs, "neonvm-apiserver-ms/VM")
}

// run measures one contender on a control plane of its own, which serves both contenders' CRDs
// (crds: NeonVM's, virtpod's are always there) so that neither run's API server does less.
func run(b *testing.B, c contender, n int, crds string) result {
	ctx := context.Background()
	env, err := kubeapi.Start(crds)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	dir := b.TempDir()
	kubeconfig, err := env.Kubeconfig(dir)
	if err != nil {
		b.Fatal(err)
	}
	cmd, metricsAddr := c.start(b, env, kubeconfig)
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	conv := watchConvergence(b, env, c, ns.Name)
	defer conv.stop()

	apiPid, etcdPid, err := env.Pids()
	if err != nil {
		b.Fatal(err)
	}
	api0, etcd0 := cpuSeconds(b, apiPid), cpuSeconds(b, etcdPid)
	req0 := requests(b, metricsAddr)
	start := time.Now()
	go kubeapi.Parallel(b, n, func(i int) error { return env.Client.Create(ctx, c.vm(ns.Name, i)) })
	if !conv.wait(n, 2*time.Minute+time.Duration(n)*200*time.Millisecond) {
		b.Fatalf("%s: only %d of %d VMs converged", c.name(), conv.count(), n)
	}
	elapsed := time.Since(start)
	time.Sleep(5 * time.Second) // trailing reconciles count per VM
	api1, etcd1 := cpuSeconds(b, apiPid), cpuSeconds(b, etcdPid)
	return result{
		seconds:     elapsed.Seconds(),
		requests:    (requests(b, metricsAddr) - req0) / float64(n),
		apiMs:       (api1 - api0) / float64(n) * 1000,
		apiLifeMs:   api1 / float64(n) * 1000,
		etcdMs:      (etcd1 - etcd0) / float64(n) * 1000,
		ctrlCPU:     cpuSeconds(b, cmd.Process.Pid),
		ctrlPeakMiB: float64(procstatus.KiB(procstatus.Read(cmd.Process.Pid), "VmHWM")) / 1024,
	}
}

// convergence follows VMs and pods by informers (list once, then watch: polling 1,000 VMs would
// load the API server being measured) and counts VMs whose status names a pod that exists.
type convergence struct {
	mu      sync.Mutex
	named   map[string]string // VM → the pod its status names
	pods    map[string]bool
	done    map[string]bool
	changed chan struct{}
	stop    func()
}

func watchConvergence(b *testing.B, env *kubeapi.Env, c contender, ns string) *convergence {
	cv := &convergence{named: map[string]string{}, pods: map[string]bool{}, done: map[string]bool{}, changed: make(chan struct{}, 1)}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cv.stop = cancel
	vms := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil).ForResource(c.vmResource()).Informer()
	onVM := func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			if pod, ok := c.podOf(u); ok {
				cv.update(func() { cv.named[u.GetName()] = pod; cv.check(u.GetName()) })
			}
		}
	}
	_, _ = vms.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onVM, UpdateFunc: func(_, obj any) { onVM(obj) }})
	pods := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns)).Core().V1().Pods().Informer()
	onPod := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			cv.update(func() {
				cv.pods[p.Name] = true
				for vm, pod := range cv.named {
					if pod == p.Name {
						cv.check(vm)
					}
				}
			})
		}
	}
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod})
	go vms.Run(ctx.Done())
	go pods.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), vms.HasSynced, pods.HasSynced) {
		b.Fatal("the benchmark's informers did not sync")
	}
	return cv
}

func (cv *convergence) update(f func()) {
	cv.mu.Lock()
	f()
	cv.mu.Unlock()
	select {
	case cv.changed <- struct{}{}:
	default:
	}
}

func (cv *convergence) check(vm string) {
	if pod := cv.named[vm]; pod != "" && cv.pods[pod] {
		cv.done[vm] = true
	}
}

func (cv *convergence) count() int {
	cv.mu.Lock()
	defer cv.mu.Unlock()
	return len(cv.done)
}

func (cv *convergence) wait(n int, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for cv.count() < n {
		select {
		case <-cv.changed:
		case <-deadline:
			return false
		}
	}
	return true
}

func requests(b *testing.B, addr string) float64 {
	m, err := promscrape.Sums(addr)
	if err != nil {
		b.Fatal(err)
	}
	return m["rest_client_requests_total"]
}

func cpuSeconds(b *testing.B, pid int) float64 {
	s, err := kubeapi.CPUSeconds(pid)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// median is each field's median over the runs.
func median(rs []result) result {
	field := func(get func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = get(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return result{
		seconds:     field(func(r result) float64 { return r.seconds }),
		requests:    field(func(r result) float64 { return r.requests }),
		apiMs:       field(func(r result) float64 { return r.apiMs }),
		apiLifeMs:   field(func(r result) float64 { return r.apiLifeMs }),
		etcdMs:      field(func(r result) float64 { return r.etcdMs }),
		ctrlCPU:     field(func(r result) float64 { return r.ctrlCPU }),
		ctrlPeakMiB: field(func(r result) float64 { return r.ctrlPeakMiB }),
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// build compiles Go main package pkg of the module in moduleDir into the file bin.
func build(b *testing.B, moduleDir, pkg, bin string, env ...string) string {
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), env...)
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building %s in %s: %v\n%s", pkg, moduleDir, err, o)
	}
	return bin
}
