// Package resize is the node agent's part of a live resize: it watches the runner pods on
// its node and, when the controller's desired size (pod annotations) differs from what the
// guest has, asks the runner for it over the pod's control socket and writes back what the
// guest then has. The controller decides; this only carries out, so it holds no state of its
// own: after a restart of the agent or of a runner it lists the pods again and converges.
package resize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/virtpod/virtpod/agent/podcontrol"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Executor carries out the resizes of the runner pods on one node.
type Executor struct {
	// A pod is resized only when its VirtualMachine's status names it (podcontrol.Authorize).
	podcontrol.Agent
	// Timeout bounds one resize request to a runner (default 5 minutes: a guest giving memory
	// back can take a while).
	Timeout time.Duration
}

// Run follows the node's runner pods until ctx ends.
func (e *Executor) Run(ctx context.Context) error {
	if e.Timeout <= 0 {
		e.Timeout = 5 * time.Minute
	}
	// Failed resizes are retried with back-off (a runner still booting, a guest slow to give
	// memory back); everything else comes from the pods' events. A few workers: one guest
	// slow to give memory back must not hold up the node's others.
	return e.Serve(ctx, podcontrol.Loop{Name: "resize", Workers: workers, MaxDelay: 5 * time.Minute, Retrying: "resize not done; retrying"},
		func(*podcontrol.NodePods) podcontrol.Handler {
			return podcontrol.GoneIsDone(func(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
				return 0, e.converge(ctx, pod)
			})
		})
}

// workers is how many pods of a node are resized at once.
const workers = 4

// converge brings one pod's guest to the desired size, if it is not there.
func (e *Executor) converge(ctx context.Context, pod *corev1.Pod) error {
	want, asked := annotated(pod, vmv1.AnnotationDesiredCPUs, vmv1.AnnotationDesiredMemory)
	if !asked || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return nil // never resized, or no guest to resize
	}
	have, reported := annotated(pod, vmv1.AnnotationGuestCPUs, vmv1.AnnotationGuestMemory)
	if reported && sameSize(have, want) {
		return nil
	}
	// A grow goes only into a pod the kubelet has resized; the controller asks only then, and
	// this checks again against what this agent sees.
	if grows(have, want, reported) && !kubeletDone(pod) {
		return nil // the kubelet's status update brings the pod back
	}
	// A pod no VM's status names gets nothing written: it is not the controller's, and what
	// the agent would write there is none of its business. The refusal is logged and retried
	// (a VM's status may name its new pod a moment after the pod's events).
	if _, err := podcontrol.Authorize(ctx, e.Kube, pod); err != nil {
		return err
	}
	ctl, err := podcontrol.Lookup(ctx, e.PodResources, e.ControlDir, pod.Namespace, pod.Name)
	if err != nil {
		return e.report(ctx, pod, Size{}, false, err)
	}
	e.Log.Info("resizing guest", zap.String("pod", pod.Namespace+"/"+pod.Name), zap.Any("want", want), zap.Stringer("control", ctl))
	got, known, err := putSize(ctx, ctl, want, e.Timeout)
	return e.report(ctx, pod, got, known, err)
}

// report writes what the guest has (when the runner said) and the failure, if any, into the
// pod's annotations; the failure is also returned, so the resize is retried with back-off.
func (e *Executor) report(ctx context.Context, pod *corev1.Pod, got Size, known bool, failed error) error {
	ann := map[string]any{vmv1.AnnotationResizeError: nil}
	if failed != nil {
		ann[vmv1.AnnotationResizeError] = failed.Error()
	}
	if known {
		ann[vmv1.AnnotationGuestCPUs] = strconv.Itoa(int(got.CPUs))
		ann[vmv1.AnnotationGuestMemory] = got.Memory
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if _, err := e.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return errors.Join(failed, fmt.Errorf("writing the guest's size to pod %s/%s: %w", pod.Namespace, pod.Name, err))
	}
	return failed
}

// annotated reads a size from two annotations; false unless both are there and valid.
func annotated(pod *corev1.Pod, cpusKey, memKey string) (Size, bool) {
	c, err := strconv.ParseInt(pod.Annotations[cpusKey], 10, 32)
	m := pod.Annotations[memKey]
	if err != nil || c < 1 || !validQuantity(m) {
		return Size{}, false
	}
	return Size{CPUs: int32(c), Memory: m}, true
}

func sameSize(a, b Size) bool { return a.CPUs == b.CPUs && cmpMemory(a.Memory, b.Memory) == 0 }

// cmpMemory compares two quantities checked valid by annotated or putSize.
func cmpMemory(a, b string) int {
	qa, qb := resource.MustParse(a), resource.MustParse(b)
	return qa.Cmp(qb)
}

// grows: want is more than the guest is known to have, in CPUs or memory (unknown counts).
func grows(have, want Size, known bool) bool {
	return !known || want.CPUs > have.CPUs || cmpMemory(want.Memory, have.Memory) > 0
}

// kubeletDone: the kubelet has seen the pod's latest resources and has no resize pending or
// under way.
func kubeletDone(pod *corev1.Pod) bool {
	if pod.Status.ObservedGeneration < pod.Generation {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress {
			return false
		}
	}
	return true
}
