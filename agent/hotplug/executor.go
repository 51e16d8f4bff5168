// Package hotplug is the node agent's part of disk hotplug (docs/hotplug.md): for a runner pod
// whose vm.virtpod.io/hotplug (the controller's digest of the VM's status.disks) the agent has
// not answered yet, it links each attached disk's NBD socket from its attachment pod's control
// directory into the runner's, asks the runner to bring its hotplug slots to the VM's
// status.disks (PUT /v1/hotplug), removes the links of disks the guest no longer has, and writes
// the runner's answer into the pod (vm.virtpod.io/hotplug-result), which is what the controller
// records. It reads what to do only from the VM's status, which only the controller writes, and
// links only the socket of an attachment pod the VM controls, made for this runner pod and
// disk, running on this node. The agent is out of the data path: the runner's QEMU connects to
// the attachment's qemu-nbd through the link, so an agent restart breaks nothing.
package hotplug

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// Executor carries out the disk hotplugs of the running guests on one node.
type Executor struct {
	podcontrol.Agent
	// Timeout bounds one request to a runner (default 2 minutes: a guest may take its time to
	// release a disk); Ready how long a running attachment pod may take to serve its socket
	// before the pod is tried again later (default 10 seconds).
	Timeout time.Duration
	Ready   time.Duration

	mu sync.Mutex
	// answered are the runner pods this agent wrote a complete result on, by digest: the watch
	// may still show a pod without it, and the runner need not be asked twice.
	answered map[types.UID]string
}

// workers is how many of a node's guests are brought to their disks at once: a guest slow to
// release a disk holds one up to the runner's release timeout.
const workers = 4

// Run follows the node's runner pods until ctx ends.
func (e *Executor) Run(ctx context.Context) error {
	if e.Timeout <= 0 {
		e.Timeout = 2 * time.Minute
	}
	if e.Ready <= 0 {
		e.Ready = 10 * time.Second
	}
	// An incomplete hotplug (an attachment pod not serving yet, a disk not released) is tried
	// again with back-off: no event of the runner pod says when its attachments are ready.
	return e.Serve(ctx, podcontrol.Loop{Name: "hotplug", Workers: workers, MaxDelay: 5 * time.Minute, Retrying: "hotplug not done; retrying"},
		func(*podcontrol.NodePods) podcontrol.Handler {
			return podcontrol.GoneIsDone(func(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
				return 0, e.handle(ctx, pod)
			})
		})
}

// handle brings one runner pod's guest to the disks its VM's status asks for, unless the pod
// has a complete answer for the controller's digest already.
func (e *Executor) handle(ctx context.Context, pod *corev1.Pod) error {
	want := pod.Annotations[vmv1.AnnotationHotplug]
	if want == "" || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || e.isAnswered(pod.UID, want) {
		return nil
	}
	prev := result(pod)
	if prev != nil && prev.For == want && complete(prev.Status, nil) {
		return nil
	}
	owner, err := podcontrol.Authorize(ctx, e.Kube, pod)
	if err != nil || owner.Migration != nil {
		return err // a guest on its way to another node gets no disk now
	}
	if got := vmv1.HotplugDigest(owner.VM.Status.Disks); got != want {
		// The controller writes the digest after the status; a status read before it is older
		// than the request, and is never carried out.
		return fmt.Errorf("VirtualMachine %s's status.disks (digest %s) is not the one pod %s asks for (%s) yet", owner.VM.Name, got, pod.Name, want)
	}
	log := e.Log.With(zap.String("pod", pod.Namespace+"/"+pod.Name), zap.String("hotplug", want))
	st, err := e.converge(ctx, pod, owner.VM, prev, log)
	if err != nil {
		return err
	}
	if err := e.answer(ctx, pod, controlapi.HotplugResult{For: want, Status: st}); err != nil {
		return err
	}
	if st.Error != "" || !complete(st, nil) {
		log.Info("hotplug not complete", zap.String("reason", st.Error))
		return fmt.Errorf("the guest of pod %s/%s does not have its disks yet: %s", pod.Namespace, pod.Name, st.Error)
	}
	log.Info("hotplug done", zap.Any("disks", st.Disks))
	e.markAnswered(pod.UID, want)
	return nil
}

// converge links the attachments, asks the runner and unlinks what the guest no longer has; it
// returns the runner's status with the disks it could not be asked for in its error. An error
// is one to retry without an answer: the runner's view is not known.
func (e *Executor) converge(ctx context.Context, pod *corev1.Pod, vm *vmv1.VirtualMachine, prev *controlapi.HotplugResult, log *zap.Logger) (controlapi.HotplugStatus, error) {
	ctl, err := podcontrol.Lookup(ctx, e.PodResources, e.ControlDir, pod.Namespace, pod.Name)
	if err != nil {
		return controlapi.HotplugStatus{}, err
	}
	req, left, err := e.request(ctx, pod, vm, ctl, prev)
	if err != nil {
		return controlapi.HotplugStatus{}, err
	}
	for _, l := range left {
		log.Warn("disk left out of the hotplug", zap.String("reason", l))
	}
	rc := podcontrol.NewClient(ctl, 0)
	defer rc.Close()
	cctx, cancel := context.WithTimeout(ctx, e.Timeout)
	defer cancel()
	log.Info("asking the runner for its hotplug disks", zap.Any("disks", req.Disks))
	st, err := rc.Hotplug(cctx, req)
	var refused *podcontrol.RunnerRefusal
	if err != nil && (!errors.As(err, &refused) || st.Disks == nil) {
		return controlapi.HotplugStatus{}, err // no view of the guest's disks to answer with
	}
	if err != nil {
		left = append(left, err.Error())
	}
	e.unlink(ctl, vm, prev, req, st, log)
	if st.Disks == nil {
		st.Disks = []controlapi.HotplugDiskState{}
	}
	if !complete(st, req.Disks) && st.Error == "" && len(left) == 0 {
		left = append(left, "the runner's answer lacks disks it was asked to attach")
	}
	st.Error = strings.Join(slices.DeleteFunc(append([]string{st.Error}, left...), func(s string) bool { return s == "" }), "; ")
	return st, nil
}

// unlink removes the links of the disks that are neither asked for nor still in the guest.
func (e *Executor) unlink(ctl podcontrol.Control, vm *vmv1.VirtualMachine, prev *controlapi.HotplugResult, req controlapi.HotplugRequest, st controlapi.HotplugStatus, log *zap.Logger) {
	names := map[string]bool{}
	for _, d := range vm.Status.Disks {
		names[d.Name] = true
	}
	if prev != nil {
		for _, d := range prev.Status.Disks {
			names[d.Name] = true
		}
	}
	for name := range names {
		_, kept := st.Attached(name)
		if kept || slices.ContainsFunc(req.Disks, func(d controlapi.HotplugDisk) bool { return d.Name == name }) {
			continue
		}
		if err := ctl.Remove(controlapi.HotplugSocket(name)); err != nil {
			log.Warn("could not remove a detached disk's link", zap.String("disk", name), zap.Error(err))
		}
	}
}

// complete says whether the guest has every disk of want (nil: of the status itself) attached,
// none failed and none on its way out.
func complete(st controlapi.HotplugStatus, want []controlapi.HotplugDisk) bool {
	if st.Error != "" {
		return false
	}
	for _, d := range st.Disks {
		if d.State != controlapi.DiskStateAttached || d.Error != "" {
			return false
		}
	}
	for _, d := range want {
		if got, ok := st.Attached(d.Name); !ok || got.Slot != d.Slot {
			return false
		}
	}
	return len(want) == 0 || len(st.Disks) == len(want)
}

// result is the agent's answer on the pod, or nil.
func result(pod *corev1.Pod) *controlapi.HotplugResult {
	raw := pod.Annotations[vmv1.AnnotationHotplugResult]
	res := &controlapi.HotplugResult{}
	if raw == "" || json.Unmarshal([]byte(raw), res) != nil {
		return nil
	}
	return res
}

// answer writes the result into the runner pod, for the controller.
func (e *Executor) answer(ctx context.Context, pod *corev1.Pod, res controlapi.HotplugResult) error {
	raw, err := json.Marshal(res)
	if err != nil {
		return err
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{vmv1.AnnotationHotplugResult: string(raw)}}})
	if _, err := e.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("writing the hotplug result to pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// maxAnswered bounds the answered pods remembered: pods come and go.
const maxAnswered = 4096

func (e *Executor) isAnswered(uid types.UID, digest string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.answered[uid] == digest
}

func (e *Executor) markAnswered(uid types.UID, digest string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.answered == nil || len(e.answered) >= maxAnswered {
		e.answered = map[types.UID]string{} // forgetting only costs a look at the pod's answer
	}
	e.answered[uid] = digest
}
