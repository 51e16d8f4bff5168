package vm

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// indexNode indexes VMs by status.node, to find the VMs on a node whose health changed.
const indexNode = "status.node"

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// nodeHealth reads the runner pod's node and says why the guest is out of reach when that node
// is not ready or was deleted (nil when it is fine). virtpod never force-deletes the pod: on a
// node that only stopped reporting the guest may still run, and while the pod object exists no
// second pod of the same name, so no second copy of the guest, can start. Kubernetes removes
// the pod once the Node is deleted or tainted out-of-service (PodGC); the pod's delete event then
// restarts the guest per its runStrategy.
func (r *Reconciler) nodeHealth(ctx context.Context, vm *vmv1.VirtualMachine, pod *corev1.Pod) (*cause, error) {
	if pod == nil || pod.Spec.NodeName == "" || podEnded(pod) {
		return nil, nil
	}
	node := &corev1.Node{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node)
	if apierrors.IsNotFound(err) {
		return nodeLost(vm, pod, nil), nil
	}
	if err != nil {
		return nil, r.fail("get-node", err)
	}
	return nodeLost(vm, pod, node), nil
}

// nodeLost words why the guest on pod's node is out of reach, and what an admin can do; nil
// when the node is ready. A nil node was deleted.
func nodeLost(vm *vmv1.VirtualMachine, pod *corev1.Pod, node *corev1.Node) *cause {
	name := pod.Spec.NodeName
	if node == nil {
		return &cause{vmv1.ReasonNodeDeleted, fmt.Sprintf("node %s was deleted; Kubernetes removes runner pod %s within about a minute (PodGC), then %s", name, pod.Name, afterLoss(vm))}
	}
	ready := nodeReady(node)
	if ready != nil && ready.Status == corev1.ConditionTrue {
		return nil
	}
	why := "no Ready condition"
	if ready != nil {
		why = fmt.Sprintf("Ready=%s: %s", ready.Status, ready.Message)
	}
	return &cause{vmv1.ReasonNodeNotReady, fmt.Sprintf("node %s is not ready (%s); the guest may still run there, so no second copy starts while runner pod %s exists. "+
		"If the node is down for good, delete it (kubectl delete node %s) or taint it (kubectl taint node %s node.kubernetes.io/out-of-service=nodeshutdown:NoExecute): "+
		"Kubernetes then removes the pod, and %s", name, why, pod.Name, name, name, afterLoss(vm))}
}

func afterLoss(vm *vmv1.VirtualMachine) string {
	switch {
	case vm.Spec.Halted():
		return "the VM is Stopped (runStrategy Halted)"
	case restarts(vm.Spec.RunStrategy, true):
		return fmt.Sprintf("the guest starts on another node (runStrategy %s)", vm.Spec.EffectiveRunStrategy())
	}
	return fmt.Sprintf("the VM is marked Failed (runStrategy %s)", vm.Spec.EffectiveRunStrategy())
}

func nodeReady(node *corev1.Node) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func nodeReadyStatus(node *corev1.Node) corev1.ConditionStatus {
	if c := nodeReady(node); c != nil {
		return c.Status
	}
	return ""
}

func (r *Reconciler) vmsOnNode(ctx context.Context, o client.Object) []reconcile.Request {
	list := &vmv1.VirtualMachineList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{indexNode: o.GetName()}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// annSelectedNode is the node the scheduler chose for a claim whose class binds on first use
// (WaitForFirstConsumer): a node-local volume (local-path, local PVs) was made there and stays.
const annSelectedNode = "volume.kubernetes.io/selected-node"

// pinnedClaims words, for a runner pod the scheduler cannot place, which of the VM's claims
// hold it to one node, and whether that node is lost: the pod can only run there, so the VM
// waits for the node rather than start without its data.
func (r *Reconciler) pinnedClaims(ctx context.Context, vm *vmv1.VirtualMachine, nodes map[string]*corev1.Node) ([]string, error) {
	var out []string
	for _, name := range vm.Spec.Guest.ClaimNames() {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: name}, pvc); err != nil {
			if apierrors.IsNotFound(err) {
				continue // DisksReady says so
			}
			return nil, r.fail("get-claim", err)
		}
		if msg := pinnedBy(pvc, nodes); msg != "" {
			out = append(out, msg)
		}
	}
	return out, nil
}

// pinnedBy says where a claim's volume ties its user, "" when nowhere known.
func pinnedBy(pvc *corev1.PersistentVolumeClaim, nodes map[string]*corev1.Node) string {
	at := pvc.Annotations[annSelectedNode]
	if at == "" {
		return ""
	}
	node, ok := nodes[at]
	switch {
	case !ok:
		return fmt.Sprintf("claim %s's volume is on node %s, which was deleted: the guest cannot start elsewhere without its data; "+
			"restore the data onto a new claim and point the VM at it", pvc.Name, at)
	case nodeReadyStatus(node) != corev1.ConditionTrue:
		return fmt.Sprintf("claim %s's volume is on node %s, which is not ready: the guest starts there once the node is back "+
			"(it cannot start elsewhere without its data; or restore the data onto a new claim and point the VM at it)", pvc.Name, at)
	}
	return fmt.Sprintf("claim %s's volume is on node %s: the runner pod can only run there", pvc.Name, at)
}
