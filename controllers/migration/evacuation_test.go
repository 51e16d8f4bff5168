package migration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/migration"
)

// podEvent waits for an event on the pod (what kubectl drain users see) of the type and reason
// whose note says each of words, and returns the note.
func podEvent(t *testing.T, pod *corev1.Pod, typ, reason string, words ...string) string {
	t.Helper()
	var note string
	eventually(t, fmt.Sprintf("%s event %s on pod %s saying %q", typ, reason, pod.Name, words), func() error {
		list := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), list, client.InNamespace(pod.Namespace)); err != nil {
			return err
		}
		var seen []string
	next:
		for _, e := range list.Items {
			if e.Regarding.Kind != "Pod" || e.Regarding.Name != pod.Name || e.Regarding.UID != pod.UID {
				continue
			}
			seen = append(seen, e.Type+" "+e.Reason+": "+e.Note)
			if e.Type != typ || e.Reason != reason {
				continue
			}
			for _, w := range words {
				if !strings.Contains(e.Note, w) {
					continue next
				}
			}
			note = e.Note
			return nil
		}
		return fmt.Errorf("events: %q", seen)
	})
	return note
}

func setNetworkMode(t *testing.T, vm *vmv1.VirtualMachine, mode vmv1.NetworkMode) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		v := getVM(t, vm)
		v.Spec.Guest.NetworkMode = mode
		return env.Client.Update(context.Background(), v)
	}); err != nil {
		t.Fatal(err)
	}
}

func budgetExists(t *testing.T, vm *vmv1.VirtualMachine) bool {
	t.Helper()
	p := &policyv1.PodDisruptionBudget{}
	err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: vm.Namespace, Name: migration.PDBName(vm.Name)}, p)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil && p.DeletionTimestamp == nil
}

// TestBudgetOnlyWhileMigratable: a LiveMigrate VM whose guest cannot move has no
// PodDisruptionBudget, so a drain is never held by it (the eviction stops the guest and it
// restarts per runStrategy); it has one while its Migratable condition is True. Cordoned, the
// VM that cannot move gets no evacuation, and its pod says why.
func TestBudgetOnlyWhileMigratable(t *testing.T) {
	ns := namespace(t)
	n1 := node(t, "a")
	vm, pod := runningVM(t, ns, "web", n1, func(v *vmv1.VirtualMachine) { v.Spec.EvictionStrategy = vmv1.EvictionLiveMigrate })
	eventually(t, "budget while migratable", func() error {
		if !budgetExists(t, vm) {
			return fmt.Errorf("no budget")
		}
		return nil
	})

	// spec.guest.networkMode Pod makes the guest unmigratable at once (its Migratable reason).
	setNetworkMode(t, vm, vmv1.NetworkPod)
	eventually(t, "budget removed once not migratable", func() error {
		if budgetExists(t, vm) {
			return fmt.Errorf("budget still there; Migratable %+v", getVM(t, vm).Status.Conditions)
		}
		return nil
	})
	cordon(t, n1, true)
	podEvent(t, pod, corev1.EventTypeWarning, vmv1.EventBudgetWithheld, "Node "+n1+" is cordoned", vmv1.ReasonNetworkNotMigratable, "restarts per runStrategy")
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: migration.EvacuationName(vm.Name)}, &vmv1.VirtualMachineMigration{}); !apierrors.IsNotFound(err) {
		t.Errorf("an evacuation of a VM that cannot migrate (%v)", err)
	}
	if budgetExists(t, vm) {
		t.Error("a budget came back for a VM that cannot migrate")
	}

	// Migratable again (the running guest has the masquerade network): the budget is back, and
	// the cordoned node's VM is evacuated.
	setNetworkMode(t, vm, vmv1.NetworkMasquerade)
	eventually(t, "budget back once migratable", func() error {
		if !budgetExists(t, vm) {
			return fmt.Errorf("no budget")
		}
		return nil
	})
	eventually(t, "evacuation", func() error {
		return env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: migration.EvacuationName(vm.Name)}, &vmv1.VirtualMachineMigration{})
	})
}

// TestFailedEvacuationRetried: a failed evacuation is made again after its back-off (10 s, then
// 20 s, from the failure) while the node stays cordoned and the budget holds the drain; the pod
// a drain evicts says each time why its evictions wait and when the next try is.
func TestFailedEvacuationRetried(t *testing.T) {
	ns := namespace(t)
	n1, n2 := node(t, "a"), node(t, "b")
	vm, source := runningVM(t, ns, "web", n1, func(v *vmv1.VirtualMachine) { v.Spec.EvictionStrategy = vmv1.EvictionLiveMigrate })
	eventually(t, "budget", func() error {
		if !budgetExists(t, vm) {
			return fmt.Errorf("no budget")
		}
		return nil
	})
	cordon(t, n1, true)
	key := types.NamespacedName{Namespace: ns, Name: migration.EvacuationName(vm.Name)}
	evacuation := func(notUID types.UID) *vmv1.VirtualMachineMigration {
		t.Helper()
		m := &vmv1.VirtualMachineMigration{}
		eventually(t, "evacuation", func() error {
			if err := env.Client.Get(context.Background(), key, m); err != nil {
				return err
			}
			if m.UID == notUID {
				return fmt.Errorf("still the failed one")
			}
			return nil
		})
		return m
	}
	evac := evacuation("")
	podEvent(t, source, corev1.EventTypeNormal, vmv1.EventEvacuating, "Node "+n1+" is cordoned: evictions of this pod wait", migration.PDBName(vm.Name), "attempt 1")

	for _, step := range []struct {
		attempt int
		backoff time.Duration
	}{{1, 10 * time.Second}, {2, 20 * time.Second}} {
		if got := evac.Annotations[migration.AnnotationEvacuationAttempt]; got != fmt.Sprint(step.attempt) {
			t.Fatalf("attempt annotation %q, want %d", got, step.attempt)
		}
		tgt := target(t, evac)
		env.Bind(t, tgt, n2)
		env.Kubelet(t, tgt, failedPod)
		failed := ended(t, evac, vmv1.MigrationFailed, vmv1.ReasonTargetFailed)
		retryAt := failed.Status.CompletionTime.Add(step.backoff).UTC().Format(time.RFC3339)
		podEvent(t, source, corev1.EventTypeWarning, vmv1.EventEvacuationFailed, fmt.Sprintf("(attempt %d) failed (%s: ", step.attempt, vmv1.ReasonTargetFailed),
			"stays cordoned and evictions of this pod wait: retry at "+retryAt, fmt.Sprintf("(back-off %s)", step.backoff))

		// A second short of the back-off, a reconcile (made by a change to the VM) makes nothing.
		clock.Advance(step.backoff - time.Second)
		poke(t, vm, fmt.Sprint(step.attempt, "-early"))
		time.Sleep(2 * time.Second)
		if m := getMig(t, evac); m.UID != evac.UID || m.DeletionTimestamp != nil {
			t.Fatalf("attempt %d: retried before its back-off of %s", step.attempt, step.backoff)
		}
		if !budgetExists(t, vm) {
			t.Fatal("the budget went while the evacuation waits to be retried")
		}
		clock.Advance(2 * time.Second)
		poke(t, vm, fmt.Sprint(step.attempt, "-due"))
		evac = evacuation(evac.UID)
		podEvent(t, source, corev1.EventTypeNormal, vmv1.EventEvacuating, fmt.Sprintf("attempt %d", step.attempt+1))
	}
}

func poke(t *testing.T, vm *vmv1.VirtualMachine, v string) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		got := getVM(t, vm)
		if got.Annotations == nil {
			got.Annotations = map[string]string{}
		}
		got.Annotations["test/poke"] = v
		return env.Client.Update(context.Background(), got)
	}); err != nil {
		t.Fatal(err)
	}
}
