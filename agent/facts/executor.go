// Package facts is the node agent's part of the guest agent: for each runner pod on its
// node whose guest has an agent channel, it asks the runner what the guest agent says (GET
// /v1/guest on the pod's control socket) and writes that into the pod's guest-facts annotation,
// which the controller copies into the VM's status. It asks the runner, on the node, every
// few seconds; it writes to the API only when the answer changed, so a steady guest costs the
// API server nothing.
package facts

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/virtpod/virtpod/agent/podcontrol"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// Executor carries the guest agents' facts of one node's runner pods into the pods.
type Executor struct {
	// Only pods a VM names are asked (podcontrol.Authorize, once per pod).
	podcontrol.Agent
	// AskWaiting and AskConnected are how often a pod's runner is asked while the guest boots
	// (no agent answers yet, or its cloud-init has not ended) and once it has booted (the facts
	// change when the guest's addresses or hostname do); defaults 5 s and 30 s.
	AskWaiting, AskConnected time.Duration

	mu         sync.Mutex
	authorized map[types.UID]bool
}

// workers is how many pods are asked at once: each ask is local and short.
const workers = 2

// Run follows the node's runner pods until ctx ends.
func (e *Executor) Run(ctx context.Context) error {
	if e.AskWaiting <= 0 {
		e.AskWaiting = 5 * time.Second
	}
	if e.AskConnected <= 0 {
		e.AskConnected = 30 * time.Second
	}
	e.authorized = map[types.UID]bool{}
	return e.Serve(ctx, podcontrol.Loop{Name: "guest facts", Workers: workers, MaxDelay: time.Minute, Retrying: "guest facts not read; retrying"},
		func(*podcontrol.NodePods) podcontrol.Handler { return podcontrol.GoneIsDone(e.ask) })
}

// ask reads one pod's guest facts and writes them into the pod when they changed.
func (e *Executor) ask(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || !hasAgentChannel(pod) {
		e.forget(pod)
		return 0, nil
	}
	if err := e.authorize(ctx, pod); err != nil {
		return 0, err
	}
	ctl, err := podcontrol.Lookup(ctx, e.PodResources, e.ControlDir, pod.Namespace, pod.Name)
	if err != nil {
		return 0, err
	}
	c := podcontrol.NewClient(ctl, 10*time.Second)
	defer c.Close()
	g, err := c.Guest(ctx)
	if err != nil {
		return 0, err
	}
	if err := e.write(ctx, pod, g); err != nil {
		return 0, err
	}
	if booting(pod, g, time.Now()) {
		return e.AskWaiting, nil
	}
	return e.AskConnected, nil
}

// bootWindow bounds how long a guest with a cloud-init seed counts as booting while its
// cloud-init has not ended: a guest image without cloud-init never ends it.
const bootWindow = 15 * time.Minute

// booting says the guest's facts are still expected to change soon: no agent answers yet, or
// the guest has a cloud-init seed whose run has not ended (its end is the bootstrap's result,
// which Cluster API waits for), within bootWindow of the pod's start.
func booting(pod *corev1.Pod, g controlapi.Guest, now time.Time) bool {
	if !g.Connected {
		return true
	}
	if g.Bootstrap != nil && g.Bootstrap.CloudInitDone || !hasCloudInit(pod) {
		return false
	}
	return pod.Status.StartTime == nil || now.Sub(pod.Status.StartTime.Time) < bootWindow
}

// authorize asks once per pod whether a VM's status names it: the answer does not change for
// the pod's life, and asking each time would be an API read per pod every few seconds.
func (e *Executor) authorize(ctx context.Context, pod *corev1.Pod) error {
	e.mu.Lock()
	ok := e.authorized[pod.UID]
	e.mu.Unlock()
	if ok {
		return nil
	}
	if _, err := podcontrol.Authorize(ctx, e.Kube, pod); err != nil {
		return err
	}
	e.mu.Lock()
	e.authorized[pod.UID] = true
	e.mu.Unlock()
	return nil
}

func (e *Executor) forget(pod *corev1.Pod) {
	e.mu.Lock()
	delete(e.authorized, pod.UID)
	e.mu.Unlock()
}

// write patches the pod's guest-facts annotation when g differs from what it holds.
func (e *Executor) write(ctx context.Context, pod *corev1.Pod, g controlapi.Guest) error {
	b, err := json.Marshal(g)
	if err != nil {
		return err
	}
	if pod.Annotations[vmv1.AnnotationGuestFacts] == string(b) {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{vmv1.AnnotationGuestFacts: string(b)}}})
	if _, err := e.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	e.Log.Info("guest facts", zap.String("pod", pod.Namespace+"/"+pod.Name), zap.Bool("connected", g.Connected), zap.String("hostname", g.Hostname))
	return nil
}

// hasAgentChannel says whether the pod's runner gives its guest an agent channel: a pod
// without one is never asked.
func hasAgentChannel(pod *corev1.Pod) bool {
	return runnerpod.Has(pod, runnerconfig.GuestAgentFlag)
}

func hasCloudInit(pod *corev1.Pod) bool {
	_, ok := runnerpod.Value(pod, runnerconfig.CloudInitUserDataFlag)
	return ok
}
