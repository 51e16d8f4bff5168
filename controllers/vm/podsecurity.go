package vm

import (
	"context"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Pod Security admission labels a namespace with the level it enforces.
const (
	podSecurityLabelPrefix  = "pod-security.kubernetes.io/"
	podSecurityEnforceLabel = podSecurityLabelPrefix + "enforce"
)

// Pod Security admission refuses a pod as Forbidden with `violates PodSecurity "<level>:<version>"`.
var podSecurityRefusal = regexp.MustCompile(`violates PodSecurity "([a-z]+)(:[^"]*)?"`)

// podSecurityLevel says whether err is Pod Security admission refusing a pod, and at which level.
func podSecurityLevel(err error) (string, bool) {
	if !apierrors.IsForbidden(err) {
		return "", false
	}
	m := podSecurityRefusal.FindStringSubmatch(err.Error())
	if m == nil {
		return "", false
	}
	return m[1], true
}

// podSecurityChanged passes namespace updates that change a Pod Security label.
func podSecurityChanged(e event.UpdateEvent) bool {
	return podSecurityLabels(e.ObjectOld) != podSecurityLabels(e.ObjectNew)
}

func podSecurityLabels(o client.Object) string {
	var b strings.Builder
	for k, v := range o.GetLabels() {
		if strings.HasPrefix(k, podSecurityLabelPrefix) {
			b.WriteString(k + "=" + v + ";")
		}
	}
	return b.String()
}

// vmsRefusedByPodSecurity are the namespace's VMs that wait for its Pod Security level.
func (r *Reconciler) vmsRefusedByPodSecurity(ctx context.Context, ns client.Object) []reconcile.Request {
	list := &vmv1.VirtualMachineList{}
	if err := r.Client.List(ctx, list, client.InNamespace(ns.GetName())); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		vm := &list.Items[i]
		for _, c := range vm.Status.Conditions {
			if c.Type == vmv1.ConditionReady && c.Reason == vmv1.ReasonPodSecurityForbidden {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(vm)})
			}
		}
	}
	return reqs
}
