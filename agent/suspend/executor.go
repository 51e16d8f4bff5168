// Package suspend is the node agent's part of a suspend: it watches the runner pods on its
// node and, for a pod the controller asked to suspend (vm.virtpod.io/suspend), asks the runner
// to save its guest (PUT /v1/suspend on the pod's control socket). The runner then ends, and its
// pod's end is what the controller records; a refusal or failure is written into the pod
// (vm.virtpod.io/suspend-error) and retried with back-off, the guest running on meanwhile. The
// controller decides; this holds no state of its own.
package suspend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/virtpod/virtpod/agent/podcontrol"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
)

// Executor carries out the suspends of the runner pods on one node.
type Executor struct {
	// A pod is suspended only when its VirtualMachine's status names it (podcontrol.Authorize)
	// and its spec asks for it.
	podcontrol.Agent
	// Timeout bounds one suspend (default 10 minutes: a large guest's state takes a while to
	// write).
	Timeout time.Duration
}

// workers is how many of a node's guests are saved at once: each writes its memory to storage.
const workers = 2

// Run follows the node's runner pods until ctx ends.
func (e *Executor) Run(ctx context.Context) error {
	if e.Timeout <= 0 {
		e.Timeout = 10 * time.Minute
	}
	return e.Serve(ctx, podcontrol.Loop{Name: "suspend", Workers: workers, MaxDelay: 5 * time.Minute, Retrying: "suspend not done; retrying"},
		func(*podcontrol.NodePods) podcontrol.Handler {
			return podcontrol.GoneIsDone(func(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
				return 0, e.suspend(ctx, pod)
			})
		})
}

// suspend saves one asked pod's guest, unless it was saved or is not asked.
func (e *Executor) suspend(ctx context.Context, pod *corev1.Pod) error {
	if pod.Annotations[vmv1.AnnotationSuspend] == "" || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return nil
	}
	// The annotation is the controller's, but anyone who may edit the pod may set it: the VM
	// whose status names the pod must ask for the suspend in its spec too.
	owner, err := podcontrol.Authorize(ctx, e.Kube, pod)
	if err != nil {
		return err
	}
	if owner.Target || !owner.VM.Spec.Suspend {
		return nil // a migration's target, or withdrawn: the controller removes the annotation
	}
	ctl, err := podcontrol.Lookup(ctx, e.PodResources, e.ControlDir, pod.Namespace, pod.Name)
	if err != nil {
		return e.report(ctx, pod, err)
	}
	e.Log.Info("suspending guest", zap.String("pod", pod.Namespace+"/"+pod.Name), zap.Stringer("control", ctl))
	st, err := save(ctx, ctl, e.Timeout)
	if err != nil {
		return e.report(ctx, pod, err)
	}
	e.Log.Info("guest suspended", zap.String("pod", pod.Namespace+"/"+pod.Name), zap.Int64("bytes", st.Bytes))
	return nil // the runner ends; its pod's end is the controller's to record
}

// save asks the runner on ctl to save its guest.
func save(ctx context.Context, ctl podcontrol.Control, timeout time.Duration) (controlapi.SuspendStatus, error) {
	rc := podcontrol.NewClient(ctl, 0)
	defer rc.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := rc.Suspend(ctx)
	if err == nil && st.State != controlapi.SuspendSaved {
		err = fmt.Errorf("the runner answered %s with state %q", controlapi.SuspendPath, st.State)
	}
	return st, err
}

// report writes the failure into the pod and returns it, so the suspend is retried with
// back-off.
func (e *Executor) report(ctx context.Context, pod *corev1.Pod, failed error) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{vmv1.AnnotationSuspendError: failed.Error()}}})
	if _, err := e.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return errors.Join(failed, fmt.Errorf("writing the suspend's failure to pod %s/%s: %w", pod.Namespace, pod.Name, err))
	}
	return failed
}
