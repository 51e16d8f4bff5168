package vm

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

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
