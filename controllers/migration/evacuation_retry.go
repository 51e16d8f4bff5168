package migration

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Annotations of an evacuation migration, the evacuator's record of its retries.
const (
	// AnnotationEvacuationAttempt is which try for the pod this evacuation is, from 1.
	AnnotationEvacuationAttempt = "vm.virtpod.io/evacuation-attempt"
	// AnnotationEvacuationRetryAt is, on a failed evacuation, when the next try is made (RFC
	// 3339); set once the failure was announced on the pod.
	AnnotationEvacuationRetryAt = "vm.virtpod.io/evacuation-retry-at"
)

// Back-off between evacuation attempts of one pod: 10 s doubling to 5 min, from the failure.
const (
	evacuationBackoff    = 10 * time.Second
	evacuationBackoffMax = 5 * time.Minute
)

func evacuationDelay(attempt int) time.Duration {
	d := evacuationBackoff
	for i := 1; i < attempt && d < evacuationBackoffMax; i++ {
		d *= 2
	}
	return min(d, evacuationBackoffMax)
}

// retry handles a failed evacuation of the VM's current pod on a cordoned node: it announces the
// failure and the next try on the pod, waits out the back-off, then makes the migration again.
// The drain's evictions keep waiting meanwhile (the budget stays while the VM is migratable).
func (e *Evacuator) retry(ctx context.Context, vm *vmv1.VirtualMachine, node *corev1.Node, old *vmv1.VirtualMachineMigration) (reconcile.Result, error) {
	attempt, _ := strconv.Atoi(old.Annotations[AnnotationEvacuationAttempt])
	attempt = max(attempt, 1)
	delay := evacuationDelay(attempt)
	failed := old.CreationTimestamp.Time
	if t := old.Status.CompletionTime; t != nil {
		failed = t.Time
	}
	at := failed.Add(delay)
	if wait := at.Sub(e.now()); wait > 0 {
		if old.Annotations[AnnotationEvacuationRetryAt] == "" {
			// Recorded first, so the announcement is made once per failure.
			patched := old.DeepCopy()
			patched.Annotations[AnnotationEvacuationRetryAt] = at.UTC().Format(time.RFC3339)
			if err := e.Client.Patch(ctx, patched, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			cause := "no cause recorded"
			if c := meta.FindStatusCondition(old.Status.Conditions, vmv1.ConditionCompleted); c != nil {
				cause = c.Reason + ": " + c.Message
			}
			msg := fmt.Sprintf("VirtualMachineMigration %s (attempt %d) failed (%s); node %s stays cordoned and evictions of this pod wait: retry at %s (back-off %s)",
				old.Name, attempt, cause, node.Name, at.UTC().Format(time.RFC3339), delay)
			e.Recorder.Eventf(runnerPod(vm), old, corev1.EventTypeWarning, vmv1.EventEvacuationFailed, "Migrate", "%s", msg)
			e.Recorder.Eventf(vm, old, corev1.EventTypeWarning, vmv1.EventEvacuationFailed, "Migrate", "%s", msg)
		}
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	if len(old.Finalizers) > 0 {
		// The migration controller releases it once cleaned up; that update brings us back. Deleted
		// only then, it is gone at once, so its attempt count carries over to the next.
		return reconcile.Result{}, nil
	}
	if err := e.Client.Delete(ctx, old, client.Preconditions{UID: &old.UID}); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	return reconcile.Result{}, e.evacuate(ctx, vm, node, attempt+1)
}

func (e *Evacuator) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}
