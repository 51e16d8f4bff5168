package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// suspendAndResume parks a running VM (spec.suspend) and brings it back: its state is saved on
// its state claim and its runner pod removed (phase Suspended, no pod holding CPU or memory);
// resumed in a new pod, the same guest goes on: its heartbeat counts on from where it was, it
// does not boot again, and it answers at its Service.
func suspendAndResume(t *testing.T, ns, name string, running *vmv1.VirtualMachine) {
	t.Helper()
	ctx := context.Background()
	pod := podspec.PodName(name)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}}}
	if err := kube.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	var before int
	eventually(t, "the guest's heartbeat", 2*time.Minute, func() error {
		if _, before = beats(podLogs(ns, pod)); before < 3 {
			return fmt.Errorf("heartbeat %d", before)
		}
		return nil
	})
	setSuspend(t, ns, name, true)
	var parked *vmv1.VirtualMachine
	eventually(t, "VM "+name+" Suspended", 3*time.Minute, func() error {
		parked = getVM(t, ns, name)
		c := meta.FindStatusCondition(parked.Status.Conditions, vmv1.ConditionSuspended)
		if parked.Status.Phase != vmv1.PhaseSuspended || parked.Status.SuspendedState == nil || c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("status %+v", parked.Status)
		}
		return nil
	})
	t.Logf("suspended: %s", meta.FindStatusCondition(parked.Status.Conditions, vmv1.ConditionSuspended).Message)
	eventually(t, "the runner pod gone", time.Minute, func() error {
		if _, err := kubeset.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s: %v", pod, err)
		}
		return nil
	})
	if st := parked.Status.SuspendedState; st.ClaimName != name+"-state" || st.Node != running.Status.Node {
		t.Errorf("suspendedState %+v: want claim %s-state on node %s", st, name, running.Status.Node)
	}

	setSuspend(t, ns, name, false)
	var back *vmv1.VirtualMachine
	eventually(t, "VM "+name+" Running again", 3*time.Minute, func() error {
		back = getVM(t, ns, name)
		if back.Status.Phase != vmv1.PhaseRunning || back.Status.SuspendedState != nil || back.Status.PodIP == "" {
			return fmt.Errorf("status %+v", back.Status)
		}
		return nil
	})
	if back.Status.RestartCount != running.Status.RestartCount || back.Status.UserRestartCount != running.Status.UserRestartCount {
		t.Errorf("the resume counted as a restart: %d/%d, were %d/%d", back.Status.RestartCount, back.Status.UserRestartCount, running.Status.RestartCount, running.Status.UserRestartCount)
	}
	var logs string
	eventually(t, "the heartbeat going on in the new pod", 2*time.Minute, func() error {
		logs = podLogs(ns, pod)
		if first, last := beats(logs); first <= before || last < first+2 {
			return fmt.Errorf("heartbeats %d to %d in the new pod, %d before the suspend", first, last, before)
		}
		return nil
	})
	if strings.Contains(logs, "VIRTPOD-GUEST-BOOTS") || strings.Contains(logs, "Linux version") {
		t.Errorf("the resumed guest booted again:\n%s", logs)
	}
	// Its Service (made before the suspend) follows it to the new pod.
	if got := fetchFrom(t, ns, svc.Spec.ClusterIP, 80); !strings.Contains(got, "virtpod guest "+name) {
		t.Errorf("the resumed guest does not answer at its Service %s: %q", svc.Spec.ClusterIP, got)
	}
}

// setSuspend sets spec.suspend by a merge patch, as vmctl suspend and resume do.
func setSuspend(t *testing.T, ns, name string, on bool) {
	t.Helper()
	vm := &vmv1.VirtualMachine{}
	vm.Namespace, vm.Name = ns, name
	body := fmt.Appendf(nil, `{"spec":{"suspend":%t}}`, on)
	if err := kube.Patch(context.Background(), vm, client.RawPatch(types.MergePatchType, body), client.FieldOwner("vmctl")); err != nil {
		t.Fatal(err)
	}
}
