package vm

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Reasons for a runner pod whose node is lost.
const (
	ReasonNodeNotReady = "NodeNotReady"
	ReasonNodeDeleted  = "NodeDeleted"
)

// indexNode indexes VMs by status.node, to find the VMs on a node whose health changed.
const indexNode = "status.node"

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// nodeHealth says so in Ready when the runner pod's node is not ready or was deleted. virtpod
// never force-deletes the pod: on a node that only stopped reporting the guest may still run,
// and while the pod object exists no second pod of the same name, so no second copy of the
// guest, can start. Kubernetes removes the pod once the Node is deleted or tainted
// out-of-service (PodGC); the pod's delete event then restarts the guest per its restartPolicy.
func (r *Reconciler) nodeHealth(ctx context.Context, st *vmv1.VirtualMachineStatus, vm *vmv1.VirtualMachine, pod *corev1.Pod) error {
	if pod == nil || pod.Spec.NodeName == "" || podEnded(pod) {
		return nil
	}
	name := pod.Spec.NodeName
	c := metav1.Condition{Type: vmv1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: vm.Generation}
	node := &corev1.Node{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: name}, node)
	switch ready := nodeReady(node); {
	case apierrors.IsNotFound(err):
		c.Reason = ReasonNodeDeleted
		c.Message = fmt.Sprintf("node %s was deleted; Kubernetes removes runner pod %s within about a minute (PodGC), then %s", name, pod.Name, afterLoss(vm))
	case err != nil:
		return r.fail("get-node", err)
	case ready == nil || ready.Status != corev1.ConditionTrue:
		why := "no Ready condition"
		if ready != nil {
			why = fmt.Sprintf("Ready=%s: %s", ready.Status, ready.Message)
		}
		c.Reason = ReasonNodeNotReady
		c.Message = fmt.Sprintf("node %s is not ready (%s); the guest may still run there, so no second copy starts while runner pod %s exists. "+
			"If the node is down for good, delete it (kubectl delete node %s) or taint it (kubectl taint node %s node.kubernetes.io/out-of-service=nodeshutdown:NoExecute): "+
			"Kubernetes then removes the pod, and %s", name, why, pod.Name, name, name, afterLoss(vm))
	default:
		return nil
	}
	meta.SetStatusCondition(&st.Conditions, c)
	return nil
}

func afterLoss(vm *vmv1.VirtualMachine) string {
	if restarts(vm.Spec.RestartPolicy, true) {
		return fmt.Sprintf("the guest starts on another node (restartPolicy %s)", vm.Spec.RestartPolicy)
	}
	return "the VM is marked Failed (restartPolicy Never)"
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
