// Package vmstats is the node agent's per-VM metrics: at each scrape of the agent's /metrics it
// asks every running guest's runner on the node for its counters (GET /v1/stats on the pod's
// control socket: the hypervisor's CPU time, the guest's memory, each disk's and the network's
// I/O) and exports them labelled with the VM's namespace and name. Nothing is polled between
// scrapes; a runner that does not answer within the scrape's bound is reported down, not waited
// for. Labels are bounded: a VM, and for disks the VM's drives.
package vmstats

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/virtpod/virtpod/agent/podcontrol"
	"github.com/virtpod/virtpod/pkg/controlapi"
)

// Executor follows the node's runner pods, learning each running one's VM and control socket
// once, and answers the scrapes.
type Executor struct {
	// Only pods a VM names are asked (podcontrol.Authorize, once per pod).
	podcontrol.Agent
	// Timeout bounds one scrape's questions to the node's runners; default 2 s.
	Timeout time.Duration

	mu      sync.Mutex
	pods    *podcontrol.NodePods
	targets map[types.UID]target
}

// target is a running guest's runner: its VM and where its control socket is.
type target struct {
	namespace, vm string
	ctl           podcontrol.Control
}

// asking is how many runners one scrape asks at once: each question is local and short.
const asking = 8

// Run follows the node's runner pods until ctx ends.
func (e *Executor) Run(ctx context.Context) error {
	if e.Timeout <= 0 {
		e.Timeout = 2 * time.Second
	}
	e.mu.Lock()
	e.targets = map[types.UID]target{}
	e.mu.Unlock()
	return e.Serve(ctx, podcontrol.Loop{Name: "vm stats", Workers: 1, MaxDelay: time.Minute, Retrying: "vm stats: runner not found; retrying"},
		func(w *podcontrol.NodePods) podcontrol.Handler {
			e.mu.Lock()
			e.pods = w
			e.mu.Unlock()
			return podcontrol.GoneIsDone(e.track)
		})
}

// track learns a running pod's VM and control directory, once.
func (e *Executor) track(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return 0, nil // dropped at the next scrape, which lists the pods afresh
	}
	e.mu.Lock()
	_, known := e.targets[pod.UID]
	e.mu.Unlock()
	if known {
		return 0, nil
	}
	owner, err := podcontrol.Authorize(ctx, e.Kube, pod)
	if err != nil {
		return 0, err
	}
	ctl, err := podcontrol.Lookup(ctx, e.PodResources, e.ControlDir, pod.Namespace, pod.Name)
	if err != nil {
		return 0, err
	}
	e.mu.Lock()
	e.targets[pod.UID] = target{namespace: pod.Namespace, vm: owner.VM.Name, ctl: ctl}
	e.mu.Unlock()
	return 0, nil
}

// current are the targets of the pods that run now; pods gone or no longer running are
// forgotten.
func (e *Executor) current() []target {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pods == nil {
		return nil
	}
	pods, err := e.pods.Lister().List(labels.Everything())
	if err != nil {
		return nil
	}
	running := map[types.UID]bool{}
	var out []target
	for _, p := range pods {
		if t, ok := e.targets[p.UID]; ok && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			running[p.UID] = true
			out = append(out, t)
		}
	}
	for uid := range e.targets {
		if !running[uid] {
			delete(e.targets, uid)
		}
	}
	return out
}

// ask asks each target's runner for its counters, asking at once at most asking runners.
func (e *Executor) ask(targets []target) []answer {
	ctx, cancel := context.WithTimeout(context.Background(), e.Timeout)
	defer cancel()
	answers := make([]answer, len(targets))
	slots := make(chan struct{}, asking)
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			c := podcontrol.NewClient(t.ctl, 0)
			defer c.Close()
			answers[i].target = t
			answers[i].stats, answers[i].err = c.Stats(ctx)
		})
	}
	wg.Wait()
	return answers
}

// answer is one runner's counters, or why there are none.
type answer struct {
	target
	stats controlapi.Stats
	err   error
}

// Describe sends every metric's description.
func (e *Executor) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
}

// Collect asks the node's runners and sends what they answered.
func (e *Executor) Collect(ch chan<- prometheus.Metric) {
	for _, a := range e.ask(e.current()) {
		collect(ch, a)
	}
}
