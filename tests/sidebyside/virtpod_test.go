package sidebyside

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
	"github.com/virtpod/virtpod/tests/loopback"
)

// virtpod is virtpod-controller as a cluster runs it: the admission policies config/admission
// ships, the default ProviderClass, 8 workers and client QPS 1000 (burst 2000).
type virtpod struct{ bin string }

func newVirtpod(b *testing.B, dir string) *virtpod {
	return &virtpod{bin: build(b, kubeapi.Root(), "./cmd/virtpod-controller", filepath.Join(dir, "virtpod-controller"))}
}

func (virtpod) name() string { return "virtpod" }

func (v *virtpod) start(b *testing.B, env *kubeapi.Env, kubeconfig string) (*exec.Cmd, string) {
	ctx := context.Background()
	qemu := kubeapi.DefaultProviderClass()
	if err := env.Client.Create(ctx, qemu); err != nil {
		b.Fatal(err)
	}
	if _, err := env.InstallAdmission(ctx); err != nil {
		b.Fatal(err)
	}
	addr := loopback.FreeAddr(b)
	cmd := exec.Command(v.bin, "--leader-elect=false", "--metrics-bind-address="+addr, "--health-probe-bind-address=0",
		"--workers=8", "--kube-api-qps=1000", "--kube-api-burst=2000", "--zap-log-level=error")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	kubeapi.Eventually(b, "virtpod-controller's metrics", 30*time.Second, func() error { return metricsUp(addr) })
	// VMs are pinned to their provider at admission once the controller has marked the default
	// class, as on a cluster that has been up a while.
	kubeapi.Eventually(b, "the qemu ProviderClass's status.default", 60*time.Second, func() error {
		pc := &vmv1.ProviderClass{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "qemu"}, pc); err != nil || pc.Status.Default {
			return err
		}
		return errors.New("not marked yet")
	})
	return cmd, addr
}

func (virtpod) vmResource() schema.GroupVersionResource {
	return vmv1.GroupVersion.WithResource("virtualmachines")
}

func (virtpod) vm(ns string, i int) *unstructured.Unstructured {
	vm := kubeapi.SampleVM(ns, vmName(i))
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(vm)
	if err != nil {
		panic(err) // a typed VM always converts
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(vmv1.GroupVersion.String())
	u.SetKind("VirtualMachine")
	return u
}

// podOf: virtpod's controller has done its part when the status names the pod and says the VM
// waits for a node (phase Scheduling, with its conditions).
func (virtpod) podOf(vm *unstructured.Unstructured) (string, bool) {
	pod, _, _ := unstructured.NestedString(vm.Object, "status", "podName")
	phase, _, _ := unstructured.NestedString(vm.Object, "status", "phase")
	return pod, pod != "" && phase == string(vmv1.PhaseScheduling)
}
