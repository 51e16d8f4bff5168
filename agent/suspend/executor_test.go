package suspend

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/virtpod/virtpod/agent/podcontrol"
	"github.com/virtpod/virtpod/agent/podcontrol/podcontroltest"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

// runnerSaves serves PUT /v1/suspend as a runner does: saved, or refused with why.
type runnerSaves struct {
	mu     sync.Mutex
	refuse string
	puts   int
}

func (r *runnerSaves) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != controlapi.SuspendPath || req.Method != http.MethodPut {
		http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.puts++
	w.Header().Set("Content-Type", "application/json")
	if r.refuse != "" {
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(controlapi.SuspendStatus{State: controlapi.SuspendNone, Error: r.refuse})
		return
	}
	_ = json.NewEncoder(w).Encode(controlapi.SuspendStatus{State: controlapi.SuspendSaved, Bytes: 204 << 20})
}

func (r *runnerSaves) count() int { r.mu.Lock(); defer r.mu.Unlock(); return r.puts }

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
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
		t.Fatal(err)
	}
	return p.Annotations[key]
}

// TestExecutorSuspends: the agent asks the runner of a pod the controller marked, once its VM
// asks for the suspend in its spec and names the pod in its status; a runner's refusal is
// written into the pod; a mark without the VM's spec.suspend (withdrawn, or forged by whoever
// may edit pods) and an unmarked pod get nothing.
func TestExecutorSuspends(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "suspend-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	controlDir, err := os.MkdirTemp("", "sa")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(controlDir) })
	pods := map[string]*corev1.Pod{
		"asked":     runnerPod(t, ns.Name, "asked", true, true, false),
		"refusing":  runnerPod(t, ns.Name, "refusing", true, true, false),
		"withdrawn": runnerPod(t, ns.Name, "withdrawn", true, false, false),
		"forged":    runnerPod(t, ns.Name, "forged", true, false, true),
		"unasked":   runnerPod(t, ns.Name, "unasked", false, true, false),
	}
	runners := map[string]*runnerSaves{}
	devices := map[string]string{}
	for name, p := range pods {
		runners[name] = &runnerSaves{}
		devices[p.Namespace+"/"+p.Name] = "ctl-" + name
		podcontroltest.ServeRunner(t, filepath.Join(controlDir, "ctl-"+name), runners[name])
	}
	runners["refusing"].refuse = "the guest is migrating: suspend it once the migration ended"
	_, kubelet := podcontroltest.Start(t, devices)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	e := &Executor{Agent: podcontrol.Agent{Client: cs, Kube: env.Client, Node: "node-a", ControlDir: controlDir, PodResources: kubelet, Log: zap.NewNop()}}
	go func() { _ = e.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	kubeapi.Eventually(t, "the asked pod's runner saves its guest", 20*time.Second, func() error {
		if n := runners["asked"].count(); n != 1 {
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
		if n := runners[name].count(); n != 0 {
			t.Errorf("pod %s: its runner was asked to suspend %d times", name, n)
		}
	}
}
