package vm

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/migratable"
)

// TestMigratable: the condition follows the verdict (True only when the guest can move), and is
// removed once no guest runs.
func TestMigratable(t *testing.T) {
	cases := []struct {
		name   string
		v      *migratable.Verdict
		status metav1.ConditionStatus // "" = no condition
	}{
		{"no guest", nil, ""},
		{"can move", &migratable.Verdict{Reason: vmv1.ReasonMigratable, Message: "ok"}, metav1.ConditionTrue},
		{"pod network", &migratable.Verdict{Reason: vmv1.ReasonNetworkNotMigratable, Message: "spec.guest.networkMode is Pod"}, metav1.ConditionFalse},
		{"resized", &migratable.Verdict{Reason: vmv1.ReasonGuestResized, Message: "resized"}, metav1.ConditionFalse},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// From a status that had the opposite, so a setter that only sets (or only clears) fails.
			st := &vmv1.VirtualMachineStatus{Conditions: []metav1.Condition{{Type: vmv1.ConditionMigratable, Status: metav1.ConditionUnknown, Reason: "Old"}}}
			setMigratable(st, 3, tc.v)
			c := meta.FindStatusCondition(st.Conditions, vmv1.ConditionMigratable)
			if tc.status == "" {
				if c != nil {
					t.Fatalf("condition %+v kept while no guest runs", c)
				}
				return
			}
			if c == nil || c.Status != tc.status || c.Reason != tc.v.Reason || c.Message != tc.v.Message || c.ObservedGeneration != 3 {
				t.Fatalf("condition %+v, want %s %s %q", c, tc.status, tc.v.Reason, tc.v.Message)
			}
		})
	}
}

// TestRunnerPodName: a VM's runner pod is the one its status names (a migrated VM's is the
// target's), and <vm>-runner before it has one and once a restart let go of the last (the
// restarted guest's new pod, even if the status write naming it was lost).
func TestRunnerPodName(t *testing.T) {
	vm := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
	if got := runnerPodName(vm); got != "web-runner" {
		t.Errorf("new VM: %q, want web-runner", got)
	}
	vm.Status.PodName, vm.Status.PodUID = "web-m1a2b3", "uid-1"
	if got := runnerPodName(vm); got != "web-m1a2b3" {
		t.Errorf("migrated VM: %q, want the status's web-m1a2b3", got)
	}
	vm.Status.PodUID = "" // restarting
	if got := runnerPodName(vm); got != "web-runner" {
		t.Errorf("migrated VM restarting: %q, want web-runner", got)
	}
	if migrating(&corev1.Pod{}) || !migrating(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{vmv1.AnnotationMigration: "uid"}}}) {
		t.Error("migrating does not follow the migration annotation")
	}
}
