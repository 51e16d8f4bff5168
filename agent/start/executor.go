// Package start is the node agent's part of a VM's start: for each runner pod on its node
// it asks the runner once, over the pod's control socket, to answer when the guest runs (GET
// /v1/started, which the runner holds until then), and writes that moment into the pod's
// guest-started annotation, from which the controller reports the VM Running. The kubelet's
// startup probe says the same, up to a second later: it probes on ticks of its own clock, and
// only once a status sync shows the container. One write per pod's start; a steady pod costs
// the API server nothing.
package start

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/virtpod/virtpod/agent/podcontrol"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
)

// Executor reports the guests' starts of one node's runner pods.
type Executor struct {
	// Only a pod the controller's objects name is asked (podcontrol.Authorize), once.
	podcontrol.Agent

	devices *podcontrol.DeviceCache
	mu      sync.Mutex
	asking  map[types.UID]context.CancelFunc // pods whose runner is being asked
	// done are the pods asked already, by namespace/name: written, or without an answer to
	// write (their runner ended first, or does not know the question: the kubelet's startup
	// probe reports those).
	done map[types.UID]string
}

// Looking for a runner's control socket: often while the pod is young (the runner serves it
// just before it starts its guest), then only on the pod's next event.
const (
	pollSocket   = 20 * time.Millisecond
	pollFor      = 5 * time.Minute
	devicesEvery = 50 * time.Millisecond
	workers      = 2
)

// Run follows the node's runner pods until ctx ends.
func (e *Executor) Run(ctx context.Context) error {
	e.devices = &podcontrol.DeviceCache{Socket: e.PodResources, Every: devicesEvery}
	e.asking, e.done = map[types.UID]context.CancelFunc{}, map[types.UID]string{}
	defer func() {
		e.mu.Lock()
		for _, cancel := range e.asking {
			cancel()
		}
		e.mu.Unlock()
	}()
	return e.Serve(ctx, podcontrol.Loop{Name: "guest start", Workers: workers, MaxDelay: 30 * time.Second, Retrying: "guest start not reported; retrying"},
		func(w *podcontrol.NodePods) podcontrol.Handler {
			return podcontrol.GoneIsDone(func(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
				return e.handle(ctx, w, pod)
			})
		})
}

// handle starts asking a pod's runner once its control socket is there; the asking runs on
// its own, since a migration target's or a resumed guest's start may be minutes away.
func (e *Executor) handle(ctx context.Context, w *podcontrol.NodePods, pod *corev1.Pod) (time.Duration, error) {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed ||
		pod.Annotations[vmv1.AnnotationGuestStarted] != "" {
		e.stop(pod.UID)
		e.mu.Lock()
		delete(e.done, pod.UID)
		e.mu.Unlock()
		return 0, nil
	}
	e.mu.Lock()
	_, asking := e.asking[pod.UID]
	_, done := e.done[pod.UID]
	e.mu.Unlock()
	if asking || done {
		return 0, nil
	}
	id, err := e.devices.Of(ctx, pod.Namespace, pod.Name)
	if err != nil {
		return e.later(pod), nil // the kubelet lists the pod once it admits it
	}
	ctl := podcontrol.Control{Root: e.ControlDir, Device: id}
	if !ctl.IsSocket(vmv1.ControlSocketName) {
		return e.later(pod), nil
	}
	if _, err := podcontrol.Authorize(ctx, e.Kube, pod); err != nil {
		return 0, err // refused (a pod no VM names, or not yet): retried with back-off, never asked
	}
	actx, cancel := context.WithCancel(ctx)
	e.mu.Lock()
	e.asking[pod.UID] = cancel
	e.mu.Unlock()
	go func() {
		e.ask(actx, ctl, pod)
		e.stop(pod.UID)
		e.markDone(w, pod)
	}()
	return 0, nil
}

// markDone remembers a pod not to ask again: answered (until its annotation shows in the cache,
// which forgets it) or not. It forgets the pods gone from the node since, deleted at once, they
// sent no update that would have.
func (e *Executor) markDone(w *podcontrol.NodePods, pod *corev1.Pod) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.done[pod.UID] = pod.Namespace + "/" + pod.Name
	for uid, key := range e.done {
		ns, name, _ := strings.Cut(key, "/")
		if p, err := w.Lister().Pods(ns).Get(name); err != nil || p.UID != uid {
			delete(e.done, uid)
		}
	}
}

// ask waits for the guest's start and writes it into the pod. It ends, writing nothing, when the
// runner ends first, does not know the question (a runner from before it) or stops answering.
func (e *Executor) ask(ctx context.Context, ctl podcontrol.Control, pod *corev1.Pod) {
	log := e.Log.With(zap.String("pod", pod.Namespace+"/"+pod.Name))
	c := podcontrol.NewClient(ctl, 0)
	defer c.Close()
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, (controlapi.MaxStartedWaitSeconds+10)*time.Second)
		st, err := c.Started(rctx, controlapi.MaxStartedWaitSeconds*time.Second)
		cancel()
		switch {
		case err != nil:
			if ctx.Err() == nil {
				log.Info("guest start not read", zap.Error(err))
			}
			return
		case st.Started:
			if err := e.write(ctx, pod, st); err != nil {
				log.Error("guest start not written", zap.Error(err))
				return
			}
			log.Info("guest started", zap.Time("since", st.Since), zap.String("machine", st.Machine))
			return
		case st.Ended:
			return // it will not start: the pod's end is the controller's to report
		}
	}
}

// write sets the pod's guest-started annotation, and its guest-machine one where the runner
// reports a machine type.
func (e *Executor) write(ctx context.Context, pod *corev1.Pod, st controlapi.Started) error {
	a := map[string]string{vmv1.AnnotationGuestStarted: st.Since.UTC().Format(time.RFC3339Nano)}
	if vmv1.MachineType.MatchString(st.Machine) {
		a[vmv1.AnnotationGuestMachine] = st.Machine
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": a}})
	_, err := e.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func (e *Executor) stop(uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if cancel := e.asking[uid]; cancel != nil {
		cancel()
		delete(e.asking, uid)
	}
}

// later is when to look for the pod's control socket again, or 0 to wait for its next event.
func (e *Executor) later(pod *corev1.Pod) time.Duration {
	if time.Since(pod.CreationTimestamp.Time) < pollFor {
		return pollSocket
	}
	return 0
}
