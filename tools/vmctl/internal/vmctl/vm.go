package vmctl

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// runner is a VM and its current runner pod.
type runner struct {
	vm  *vmv1.VirtualMachine
	pod *corev1.Pod
}

func (r runner) String() string { return r.vm.Namespace + "/" + r.vm.Name }

// vm reads VM name in the connection's namespace; a missing one is a one-line error.
func (cn *conn) vm(ctx context.Context, name string) (*vmv1.VirtualMachine, error) {
	vm := &vmv1.VirtualMachine{}
	if err := cn.c.Get(ctx, client.ObjectKey{Namespace: cn.ns, Name: name}, vm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("VirtualMachine %q not found in namespace %q", name, cn.ns)
		}
		return nil, apiError("virtualmachines", fmt.Sprintf("getting VirtualMachine %s/%s", cn.ns, name), err)
	}
	return vm, nil
}

// runnerPod finds VM name's runner pod (status.podName). With running, the pod must be
// running, since a console or a port-forward needs its runner; logs take any pod that exists.
// Every way of not finding one is one line that says where the VM is instead.
func (cn *conn) runnerPod(ctx context.Context, name string, running bool) (runner, error) {
	vm, err := cn.vm(ctx, name)
	if err != nil {
		return runner{}, err
	}
	r := runner{vm: vm}
	phase := string(vm.Status.Phase)
	if phase == "" {
		phase = "new (no status yet)"
	}
	if vm.Status.PodName == "" {
		return r, fmt.Errorf("VM %s is %s: it has no runner pod", r, phase)
	}
	pod, err := cn.cs.CoreV1().Pods(cn.ns).Get(ctx, vm.Status.PodName, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return r, fmt.Errorf("VM %s is %s: its runner pod %s is gone", r, phase, vm.Status.PodName)
		}
		return r, fmt.Errorf("getting the runner pod of VM %s: %w", r, err)
	}
	r.pod = pod
	if running && !runnerRunning(pod) {
		return r, fmt.Errorf("VM %s is %s: its runner pod %s is %s, not running", r, phase, pod.Name, pod.Status.Phase)
	}
	return r, nil
}

func runnerRunning(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	c := runnerpod.Status(pod)
	return c != nil && c.State.Running != nil
}

// findRunner connects and finds VM name's runner pod (see runnerPod).
func (a *app) findRunner(name string, running bool) (*conn, runner, error) {
	cn, err := a.connect()
	if err != nil {
		return nil, runner{}, err
	}
	ctx, cancel := a.ctx()
	defer cancel()
	r, err := cn.runnerPod(ctx, name, running)
	return cn, r, err
}

// completeVMs completes a VM name in the namespace vmctl would use.
func (a *app) completeVMs(_ *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.complete(prefix, func(ctx context.Context, cn *conn) ([]string, error) {
		vms := &vmv1.VirtualMachineList{}
		err := cn.c.List(ctx, vms, client.InNamespace(cn.ns))
		names := make([]string, len(vms.Items))
		for i, vm := range vms.Items {
			names[i] = vm.Name
		}
		return names, err
	})
}

func (a *app) completeNamespaces(_ *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	return a.complete(prefix, func(ctx context.Context, cn *conn) ([]string, error) {
		list, err := cn.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		names := make([]string, len(list.Items))
		for i, ns := range list.Items {
			names[i] = ns.Name
		}
		return names, nil
	})
}

// complete offers the names list returns that start with prefix.
func (a *app) complete(prefix string, list func(context.Context, *conn) ([]string, error)) ([]string, cobra.ShellCompDirective) {
	cn, err := a.connect()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	ctx, cancel := a.ctx()
	defer cancel()
	all, err := list(ctx, cn)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, n := range all {
		if strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
