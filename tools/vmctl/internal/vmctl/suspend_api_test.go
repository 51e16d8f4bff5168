package vmctl

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// suspendVerbs: vmctl suspend waits until the runner saved the guest (here the test plays the
// node agent and the runner: the pod asked, the runner's suspended end) and says so; resume
// starts a pod that loads the state; a VM without a state claim is refused, naming the field.
// ns has no simulated kubelets: the test plays them.
func suspendVerbs(t *testing.T, ns, kc string) {
	plain := createVM(t, kubeapi.SampleVM(ns, "plain"))
	if _, errOut, code := vmctl("--kubeconfig", kc, "suspend", plain.Name); code != 1 || !strings.Contains(errOut, "has no spec.guest.stateClaim") {
		t.Errorf("suspend without a state claim: exit %d, %q", code, errOut)
	}
	if out, _, code := vmctl("--kubeconfig", kc, "resume", plain.Name); code != 0 || !strings.Contains(out, "is not suspended") {
		t.Errorf("resume of a VM not suspended: exit %d, %q", code, out)
	}

	for _, c := range []string{"parked-root", "parked-state"} {
		if err := kubeapi.BoundClaim(context.Background(), env.Client, ns, c); err != nil {
			t.Fatal(err)
		}
	}
	vm := kubeapi.SampleVM(ns, "parked")
	vm.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "parked-root"}
	vm.Spec.Guest.StateClaim = &vmv1.StateClaim{ClaimName: "parked-state"}
	vm.Spec.Guest.NetworkMode = vmv1.NetworkMasquerade
	createVM(t, vm)
	var p *corev1.Pod
	kubeapi.Eventually(t, "parked's pod", 20*time.Second, func() (err error) { p, err = pod(vm); return err })
	env.Bind(t, p, "power-node")
	env.Kubelet(t, p, func(s *corev1.PodStatus) {
		kubeapi.RunnerRunning("10.99.0.2")(s)
		s.ContainerStatuses[0].Started = ptr.To(true)
	})
	runningIn(t, vm, "")

	type result struct {
		out, errOut string
		code        int
	}
	done := make(chan result, 1)
	go func() {
		o, e, c := vmctl("--kubeconfig", kc, "suspend", "parked", "--timeout", "40s")
		done <- result{o, e, c}
	}()
	kubeapi.Eventually(t, "the suspend asked of parked's pod", 20*time.Second, func() error {
		got, err := pod(vm)
		if err != nil || got.Annotations[vmv1.AnnotationSuspend] == "" {
			return fmt.Errorf("annotations %v, %v", got.Annotations, err)
		}
		return nil
	})
	env.Kubelet(t, p, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodSucceeded
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: vmv1.RunnerContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", Message: vmv1.MessageSuspended + vmv1.StateFile, FinishedAt: metav1.Now()}}}}
	})
	var r result
	select {
	case r = <-done:
	case <-time.After(50 * time.Second):
		t.Fatal("vmctl suspend did not return")
	}
	if r.code != 0 || !strings.Contains(r.out, "spec.suspend true: the guest's state is saved on claim parked-state") || !strings.Contains(r.out, "Suspended after ") {
		t.Fatalf("suspend: exit %d, stderr %q, stdout:\n%s", r.code, r.errOut, r.out)
	}
	if out, _, code := vmctl("--kubeconfig", kc, "suspend", "parked"); code != 0 || !strings.Contains(out, "is already suspended") {
		t.Errorf("suspend again: exit %d, %q", code, out)
	}

	if out, errOut, code := vmctl("--kubeconfig", kc, "resume", "parked", "--wait=false"); code != 0 || !strings.Contains(out, "spec.suspend false: resuming") {
		t.Fatalf("resume: exit %d, %q %q", code, out, errOut)
	}
	kubeapi.Eventually(t, "a pod that resumes the guest", 20*time.Second, func() error {
		got, err := pod(vm)
		if err != nil || got.UID == p.UID || !podspec.ResumedFrom(got) {
			return fmt.Errorf("pod %v: %v", got.UID, err)
		}
		return nil
	})
}
