package suspend

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/virtpod/virtpod/agent/podcontrol/podcontroltest"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

// runnerPod creates a running runner pod on node-a, asked to suspend or not, controlled and
// named by a VM whose spec.suspend is suspend (no VM when foreign).
func runnerPod(t *testing.T, ns, name string, asked, suspend, foreign bool) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{vmv1.LabelManagedBy: vmv1.ManagedBy}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: vmv1.RunnerContainer, Image: "runner", Args: []string{"--suspend-to=" + vmv1.StateFile}}}}}
	if asked {
		pod.Annotations = map[string]string{vmv1.AnnotationSuspend: "true"}
	}
	var vm *vmv1.VirtualMachine
	if !foreign {
		vm = kubeapi.SampleVM(ns, name)
		vm.Spec.Suspend = suspend
		vm.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: name + "-root"}
		vm.Spec.Guest.StateClaim = &vmv1.StateClaim{ClaimName: name + "-state"}
		vm.Spec.Guest.NetworkMode = vmv1.NetworkMasquerade
		if err := env.Client.Create(ctx, vm); err != nil {
			t.Fatal(err)
		}
		podcontroltest.Own(pod, vm)
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if vm != nil {
		podcontroltest.Name(t, env.Client, vm, pod)
	}
	return pod
}

func annotation(t *testing.T, pod *corev1.Pod, key string) string {
	t.Helper()
	return podcontroltest.Current(t, env.Client, pod).Annotations[key]
}

// TestExecutorSuspends: the agent asks the runner of a pod the controller marked, once its VM
// asks for the suspend in its spec and names the pod in its status; a runner's refusal is
// written into the pod; a mark without the VM's spec.suspend (withdrawn, or forged by whoever
// may edit pods) and an unmarked pod get nothing.
func TestExecutorSuspends(t *testing.T) {
	ns := podcontroltest.Namespace(t, env.Client, "suspend-")
	pods := map[string]*corev1.Pod{
		"asked":     runnerPod(t, ns, "asked", true, true, false),
		"refusing":  runnerPod(t, ns, "refusing", true, true, false),
		"withdrawn": runnerPod(t, ns, "withdrawn", true, false, false),
		"forged":    runnerPod(t, ns, "forged", true, false, true),
		"unasked":   runnerPod(t, ns, "unasked", false, true, false),
	}
	node := podcontroltest.NewNode(t, "node-a")
	runners := map[string]*podcontroltest.Runner{}
	for name, p := range pods {
		runners[name] = &podcontroltest.Runner{}
		runners[name].Answer(http.MethodPut, controlapi.SuspendPath, http.StatusOK, controlapi.SuspendStatus{State: controlapi.SuspendSaved, Bytes: 204 << 20})
		if name == "refusing" {
			runners[name].Fail(http.MethodPut, controlapi.SuspendPath, http.StatusConflict, "the guest is migrating: suspend it once the migration ended")
		}
		node.Serve(t, p, "ctl-"+name, runners[name])
	}
	puts := func(name string) int { return runners[name].Count(http.MethodPut, controlapi.SuspendPath) }
	e := &Executor{Agent: node.Agent(t, env)}
	podcontroltest.Run(t, e.Run)

	kubeapi.Eventually(t, "the asked pod's runner saves its guest", 20*time.Second, func() error {
		if n := puts("asked"); n != 1 {
			return fmt.Errorf("%d PUTs", n)
		}
		return nil
	})
	kubeapi.Eventually(t, "the refusal in the pod", 20*time.Second, func() error {
		if got := annotation(t, pods["refusing"], vmv1.AnnotationSuspendError); !strings.Contains(got, "the guest is migrating") {
			return fmt.Errorf("suspend-error %q", got)
		}
		return nil
	})
	if got := annotation(t, pods["asked"], vmv1.AnnotationSuspendError); got != "" {
		t.Errorf("the saved guest's pod has an error: %q", got)
	}
	for _, name := range []string{"withdrawn", "forged", "unasked"} {
		if n := puts(name); n != 0 {
			t.Errorf("pod %s: its runner was asked to suspend %d times", name, n)
		}
	}
}
