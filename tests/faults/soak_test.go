package faults

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/churn"
	"github.com/virtpod/virtpod/tests/heapprof"
	"github.com/virtpod/virtpod/tests/kubeapi"
	"github.com/virtpod/virtpod/tests/loopback"
	"github.com/virtpod/virtpod/tests/procstatus"
	"github.com/virtpod/virtpod/tests/promscrape"
)

// BenchmarkSoak churns VMs against the real controller binary for VIRTPOD_SOAK_MINUTES (10 by
// default; `make soak`), with kube-controller-manager's garbage collector: 40 slots, each holding
// a VM that is created, resized, stopped, started, restarted on request, crashed once in a while
// and deleted, an action every 100 ms, on three simulated nodes. After a warm-up minute it takes
// the controller's baseline (resident memory, Go heap in use, goroutines); at the end every VM is
// deleted and the same figures are taken once the namespace is empty and the heap has settled
// (VIRTPOD_SOAK_SETTLE, 13 minutes at most: the event recorder's cache). It fails on a pod or VM left behind, a work queue not
// drained, or goroutines or heap more than 10% above the baseline. Live migration is not
// churned: it needs real runners and node agents (tests/e2e moves guests).
func BenchmarkSoak(b *testing.B) {
	minutes := churn.Minutes(b)
	const slots = 40
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(faultSeed(b), 2))
	s := newScene(b, "soak-1", "soak-2", "soak-3")
	// The garbage collector removes a deleted VM's pods (their owner references), as in a
	// cluster: the API server alone would keep them.
	startKCM(b, kcmBinary(b), s.kubeconfig, "garbage-collector-controller")
	metrics, pprofAddr := loopback.FreeAddr(b), loopback.FreeAddr(b)
	c := s.startProcess(b, "--leader-elect=false", "--metrics-bind-address="+metrics, "--pprof-bind-address="+pprofAddr)
	kubeapi.Eventually(b, "controller metrics", 30*time.Second, func() error { _, err := promscrape.Sums(metrics); return err })
	// One VM in twenty crashes in its first run (the kubelets call this from their own goroutines:
	// a hash of the name, not rnd).
	s.kubelets.CrashOnce(func(pod string) bool { h := fnv.New32a(); h.Write([]byte(pod)); return h.Sum32()%20 == 0 })

	gen := make([]int, slots)
	name := func(i int) string { return fmt.Sprintf("soak-%02d-%d", i, gen[i]) }
	patch := func(i int, body string) {
		vm := &vmv1.VirtualMachine{}
		vm.Namespace, vm.Name = s.ns, name(i)
		if err := env.Client.Patch(ctx, vm, client.RawPatch(types.MergePatchType, []byte(body))); err != nil && !apierrors.IsNotFound(err) {
			b.Errorf("patch %s: %v", vm.Name, err)
		}
	}
	created, actions := 0, map[string]int{}
	act := func(i int) {
		vm := &vmv1.VirtualMachine{}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name(i)}, vm)
		switch {
		case apierrors.IsNotFound(err):
			s.createVM(ctx, b, name(i), func(vm *vmv1.VirtualMachine) { vm.Spec.Guest.MaxMemory = ptr.To(resource.MustParse("512Mi")) })
			created++
			actions["create"]++
			return
		case err != nil:
			b.Fatal(err)
		case vm.DeletionTimestamp != nil:
			return
		}
		what := churn.Next(rnd, vm.Spec.Halted())
		switch what {
		case churn.Delete:
			if err := env.Client.Delete(ctx, vm); err != nil && !apierrors.IsNotFound(err) {
				b.Errorf("delete %s: %v", vm.Name, err)
			}
			gen[i]++
		case churn.Own:
			what = "resize"
			patch(i, fmt.Sprintf(`{"spec":{"guest":{"memory":"%dMi"}}}`, 256+128*rnd.IntN(2)))
		default:
			patch(i, churn.Patch(what))
		}
		actions[string(what)]++
	}

	run := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			act(rnd.IntN(slots))
		}
	}
	for i := range slots {
		act(i)
	}
	run(time.Minute)
	base := s.controllerFigures(b, c, metrics, pprofAddr)
	run(time.Duration((minutes - 1) * float64(time.Minute)))

	if err := env.Client.DeleteAllOf(ctx, &vmv1.VirtualMachine{}, client.InNamespace(s.ns)); err != nil {
		b.Fatal(err)
	}
	kubeapi.Eventually(b, "no VM and no pod left", 5*time.Minute, func() error {
		vms, pods := &vmv1.VirtualMachineList{}, &corev1.PodList{}
		if err := env.Client.List(ctx, vms, client.InNamespace(s.ns)); err != nil {
			return err
		}
		if err := env.Client.List(ctx, pods, client.InNamespace(s.ns)); err != nil {
			return err
		}
		if len(vms.Items)+len(pods.Items) > 0 {
			return fmt.Errorf("%d VMs and %d pods left", len(vms.Items), len(pods.Items))
		}
		return nil
	})
	var end figures
	// Let the queues drain and the collector run: the same settle the baseline had mid-churn.
	kubeapi.Eventually(b, "the controller's work queues drained", time.Minute, func() error {
		end = s.controllerFigures(b, c, metrics, pprofAddr)
		if end.queued > 0 {
			return fmt.Errorf("%g items queued", end.queued)
		}
		return nil
	})
	// The heap is judged once it has settled: the event recorder (client-go's events
	// broadcaster) keeps each event it sent to fold repeats into a series, and drops those
	// older than 6 minutes every 6 minutes, so an event can be held for up to 12 minutes (2 MiB
	// of the heap after a 6-minute churn, by a profile). It passes as soon as the heap is back;
	// it fails if it is not after that.
	settle := 13 * time.Minute
	if v := os.Getenv("VIRTPOD_SOAK_SETTLE"); v != "" {
		var err error
		if settle, err = time.ParseDuration(v); err != nil {
			b.Fatalf("VIRTPOD_SOAK_SETTLE: %v", err)
		}
	}
	deleted0 := time.Now()
	first := end
	for end.heapMiB > base.heapMiB*1.1 && time.Since(deleted0) < settle {
		time.Sleep(10 * time.Second)
		end = s.controllerFigures(b, c, metrics, pprofAddr)
	}
	fmt.Printf("heap right after the deletes %.1f MiB; %.1f MiB %v later\n", first.heapMiB, end.heapMiB, time.Since(deleted0).Round(time.Second))
	added, deleted := s.podCounts()
	fmt.Printf("soak: %.1f minutes, %d VMs created, actions %v, %d runner pods made and %d removed\n", minutes, created, actions, added, deleted)
	fmt.Printf("controller    baseline (1 min, %d VMs)   end (all deleted)\n", slots)
	fmt.Printf("  RSS         %8.1f MiB              %8.1f MiB\n", base.rssMiB, end.rssMiB)
	fmt.Printf("  heap in use %8.1f MiB              %8.1f MiB\n", base.heapMiB, end.heapMiB)
	fmt.Printf("  goroutines  %8.0f                  %8.0f\n", base.goroutines, end.goroutines)
	if end.goroutines > base.goroutines*1.1 {
		b.Errorf("goroutines %g at the end, baseline %g: a leak", end.goroutines, base.goroutines)
	}
	if end.heapMiB > base.heapMiB*1.1 {
		b.Errorf("heap in use %.1f MiB at the end, baseline %.1f MiB: a leak", end.heapMiB, base.heapMiB)
		heapTop(b, pprofAddr)
	}
	if !c.alive() {
		b.Fatal("the controller exited")
	}
}

type figures struct {
	rssMiB, heapMiB, goroutines, queued float64
}

// controllerFigures reads the controller's resident memory from /proc and its Go heap,
// goroutines and work-queue depth from its metrics endpoint. The heap is read after two
// collections (the profiling endpoint's gc=1): one leaves what sync.Pools hold (the metrics
// endpoint's gzip writers, 2 MiB) for the next, and whether a collection had just run would
// otherwise decide a 10% verdict on a 12 MiB heap.
func (s *scene) controllerFigures(b *testing.B, c *controller, addr, pprofAddr string) figures {
	b.Helper()
	if err := heapprof.Collect(pprofAddr); err != nil {
		b.Fatal(err)
	}
	m, err := promscrape.Sums(addr)
	if err != nil {
		b.Fatal(err)
	}
	return figures{
		rssMiB:     float64(procstatus.KiB(procstatus.Read(c.cmd.Process.Pid), "VmRSS")) / 1024,
		heapMiB:    m["go_memstats_heap_inuse_bytes"] / (1 << 20),
		goroutines: m["go_goroutines"],
		queued:     m["workqueue_depth"],
	}
}

// heapTop prints what holds the controller's heap: the largest in-use allocation sites of a
// heap profile taken after a collection (`go tool pprof -top`), and where the profile is kept.
func heapTop(b *testing.B, addr string) {
	top, file, err := heapprof.Top(addr)
	if err != nil {
		b.Errorf("heap profile: %v", err)
		return
	}
	fmt.Printf("the controller's heap at the end (profile kept in %s):\n%s\n", file, top)
}
