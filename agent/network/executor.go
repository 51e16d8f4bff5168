// Package network is the node agent's part of the guest's network. The runner holds no
// capability (Pod Security restricted), so for each runner pod on its node the agent takes the
// pod's network namespace from the runner (pkg/handoff, on the pod's control directory) and
// builds the guest's wiring there (pkg/network/podnetwork): what to build comes from the pod's spec,
// which only the controller writes, and only for a pod the controller's objects name
// (podcontrol.Authorize). It keeps no state the pods do not: after a restart it asks every
// runner again, and a runner already plumbed says so and is left as it is.
package network

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/virtpod/virtpod/agent/podcontrol"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/network/podnetwork"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// Executor plumbs the runner pods of one node.
type Executor struct {
	podcontrol.Agent
	// Kernels unpacks the bzImages runners hand over with their namespaces (nil: none is).
	Kernels podnetwork.Kernels

	mu   sync.Mutex
	pods map[types.UID]*podState

	devices *podcontrol.DeviceCache // the kubelet's pod-resources answer, shared by every starting pod
}

// podState is what the executor learnt of one pod: whether it may act for it, where its
// control directory is, whether it is done with it and, once plumbed, its network namespace,
// where the spoof guard's counters are read (Collect).
type podState struct {
	req        *podnetwork.Request // what to build, read once from the pod's spec (its PodIP not kept)
	authorized bool
	ctl        *podcontrol.Control
	done       bool
	pod        string // namespace/name
	ns         *os.File
}

// Polling for a runner's socket: fast while the runner container runs (it listens at once),
// slower while the pod starts, and not at all for a pod that has been starting for long: its
// container's start is a pod event that brings it back.
const (
	pollRunning  = 10 * time.Millisecond
	pollStarting = 20 * time.Millisecond
	pollFor      = 30 * time.Second
	workers      = 4
	devicesEvery = 50 * time.Millisecond
)

// Run follows the node's runner pods until ctx ends.
func (e *Executor) Run(ctx context.Context) error {
	e.devices = &podcontrol.DeviceCache{Socket: e.PodResources, Every: devicesEvery}
	defer func() {
		e.mu.Lock()
		for _, s := range e.pods {
			if s.ns != nil {
				s.ns.Close()
			}
		}
		e.pods = nil
		e.mu.Unlock()
	}()
	return e.Serve(ctx, podcontrol.Loop{Name: "network", Workers: workers, MaxDelay: 30 * time.Second, Retrying: "pod network not plumbed; retrying"},
		func(*podcontrol.NodePods) podcontrol.Handler { return e.handle })
}

func (e *Executor) state(uid types.UID) *podState {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pods == nil {
		e.pods = map[types.UID]*podState{}
	}
	s := e.pods[uid]
	if s == nil {
		s = &podState{}
		e.pods[uid] = s
	}
	return s
}

func (e *Executor) forget(uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.pods[uid]; s != nil && s.ns != nil {
		s.ns.Close()
	}
	delete(e.pods, uid)
}

// handle plumbs one pod, once: it waits for the runner's socket, hands the namespace to
// podnetwork and remembers it. A pod that ended is forgotten.
func (e *Executor) handle(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || runnerEnded(pod) {
		e.forget(pod.UID)
		return 0, nil
	}
	s := e.state(pod.UID)
	if s.done {
		return 0, nil
	}
	if s.req == nil {
		req, ok, err := podnetwork.RequestFor(pod)
		if err != nil {
			return 0, err
		}
		if !ok {
			s.done = true // no network to build
			return 0, nil
		}
		s.req = &req
	}
	req := *s.req
	req.PodIP = net.ParseIP(pod.Status.PodIP) // the status, unlike the spec, fills in as the pod starts
	log := e.Log.With(zap.String("pod", pod.Namespace+"/"+pod.Name))
	// Local checks first (the kubelet's device, the runner's socket), the API's last: by the
	// time a runner listens, the controller has long named its pod in the VM's status, so
	// authorizing then is neither refused for being early nor asked again and again.
	if s.ctl == nil {
		id, err := e.devices.Of(ctx, pod.Namespace, pod.Name)
		if err != nil {
			return e.later(pod), nil // the kubelet lists the pod once it admits it
		}
		s.ctl = &podcontrol.Control{Root: e.ControlDir, Device: id}
	}
	if !s.ctl.IsSocket(vmv1.NetnsSocketName) {
		return e.later(pod), nil // the runner is not listening yet
	}
	if !s.authorized {
		// A pod the controller's objects do not name is refused, logged and retried with
		// back-off (a VM's status may name its new pod a moment late), never acted on.
		if _, err := podcontrol.Authorize(ctx, e.Kube, pod); err != nil {
			return 0, err
		}
		s.authorized = true
	}
	c, err := s.ctl.Dial(ctx, vmv1.NetnsSocketName)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	ns, built, err := podnetwork.Handle(c.(*net.UnixConn), req, e.Kernels)
	if errors.Is(err, podnetwork.ErrNoHandoff) {
		return 0, err // the runner is still waiting: try again, with back-off
	}
	if err != nil {
		// The runner was told, and fails the VM with it; nothing to retry in this pod.
		log.Error("pod network not plumbed", zap.Stringer("request", req), zap.Error(err))
		s.done = true
		return 0, nil
	}
	e.mu.Lock()
	s.done, s.pod, s.ns = true, pod.Namespace+"/"+pod.Name, ns
	e.mu.Unlock()
	if built {
		log.Info("pod network plumbed", zap.Stringer("request", req), zap.Duration("took", time.Since(start)))
	} else {
		log.Info("pod network found plumbed", zap.Stringer("request", req))
	}
	return 0, nil
}

// later is when to look for the runner's socket again, or 0 to wait for the pod's next event.
func (e *Executor) later(pod *corev1.Pod) time.Duration {
	if runnerRunning(pod) {
		return pollRunning
	}
	if time.Since(pod.CreationTimestamp.Time) < pollFor {
		return pollStarting
	}
	return 0
}

func runnerRunning(pod *corev1.Pod) bool {
	cs := runnerpod.Status(pod)
	return cs != nil && cs.State.Running != nil
}

func runnerEnded(pod *corev1.Pod) bool {
	cs := runnerpod.Status(pod)
	return cs != nil && cs.State.Terminated != nil
}

var droppedDesc = prometheus.NewDesc("virtpod_agent_spoofed_frames_dropped_total",
	"Frames a guest on this node sent with a source other than its own MAC and address, dropped on its tap, by runner pod and counter (mac, arp, ip, other).",
	[]string{"namespace", "pod", "counter"}, nil)

// Describe and Collect make the executor a Prometheus collector of the spoof guards' counters,
// read from the kernel at scrape time in each plumbed pod's namespace.
func (e *Executor) Describe(ch chan<- *prometheus.Desc) { ch <- droppedDesc }

// Collect reads every plumbed pod's counters. It holds the lock throughout, so no namespace
// descriptor is closed (a pod forgotten) while it is read.
func (e *Executor) Collect(ch chan<- prometheus.Metric) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.pods {
		if s.ns == nil {
			continue
		}
		m, err := podnetwork.Dropped(int(s.ns.Fd()))
		if err != nil {
			continue // a pod going away; its counters go with it
		}
		ns, name, _ := strings.Cut(s.pod, "/")
		for counter, v := range m {
			ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(v), ns, name, counter)
		}
	}
}
