package vm

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/providerclass"
)

// ProviderAvailable and SoftwareEmulation reasons.
const (
	ReasonProviderAvailable   = "ProviderAvailable"
	ReasonProviderNotFound    = "ProviderNotFound"
	ReasonProviderDisabled    = "ProviderDisabled"
	ReasonNoDefaultProvider   = "NoDefaultProvider"
	ReasonEmulationNotAllowed = "EmulationNotAllowed"
	ReasonEmulationRequested  = "EmulationRequested"
	ReasonHardwareVirt        = "KVM"
)

// verdict is what the VM's ProviderClass allows.
type verdict struct {
	class   *vmv1.ProviderClass // nil when there is none to use
	blocked bool                // no new runner pod may start
	cond    metav1.Condition
}

// provider resolves the VM's ProviderClass and says whether a new pod may start. A VM with no
// provider has none resolved yet: see defaultProvider.
func (r *Reconciler) provider(ctx context.Context, vm *vmv1.VirtualMachine) (verdict, error) {
	v := verdict{cond: metav1.Condition{Type: vmv1.ConditionProviderAvailable, Status: metav1.ConditionFalse, ObservedGeneration: vm.Generation}}
	block := func(reason, format string, args ...any) (verdict, error) {
		v.blocked, v.cond.Reason, v.cond.Message = true, reason, fmt.Sprintf(format, args...)
		return v, nil
	}
	name := string(vm.Spec.Provider)
	class := &vmv1.ProviderClass{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, class); apierrors.IsNotFound(err) {
		return block(ReasonProviderNotFound, "ProviderClass %s does not exist, so no node is offered for it; an admin creates it (kubectl get providerclasses lists those there are)", name)
	} else if err != nil {
		return v, r.fail("get-providerclass", err)
	}
	v.class = class
	if class.Spec.Enabled != nil && !*class.Spec.Enabled {
		msg := fmt.Sprintf("ProviderClass %s is disabled by an admin", name)
		if class.Spec.DisabledReason != "" {
			msg += ": " + class.Spec.DisabledReason
		}
		return block(ReasonProviderDisabled, "%s; a running guest keeps running, but none starts until it is enabled (vmctl provider enable %s)", msg, name)
	}
	if vm.Spec.Acceleration == vmv1.AccelerationEmulated && !class.Spec.AllowEmulation {
		return block(ReasonEmulationNotAllowed, "the VM asks for software emulation and ProviderClass %s does not allow it (spec.allowEmulation); use acceleration KVM or ask an admin", name)
	}
	v.cond.Status, v.cond.Reason = metav1.ConditionTrue, ReasonProviderAvailable
	v.cond.Message = fmt.Sprintf("ProviderClass %s is enabled", name)
	if c := meta.FindStatusCondition(class.Status.Conditions, vmv1.ConditionAvailable); c != nil {
		v.cond.Message += "; " + c.Message
	}
	return v, nil
}

// defaultProvider writes the default class's provider into the VM's spec, once, so a later
// change of default never moves it. It reports false when there is no single default.
func (r *Reconciler) defaultProvider(ctx context.Context, vm *vmv1.VirtualMachine) (bool, verdict, error) {
	list := &vmv1.ProviderClassList{}
	if err := r.Client.List(ctx, list); err != nil {
		return false, verdict{}, r.fail("list-providerclasses", err)
	}
	var defaults []string
	for _, c := range list.Items {
		if c.Annotations[vmv1.AnnotationDefaultClass] == "true" {
			defaults = append(defaults, c.Name)
		}
	}
	sort.Strings(defaults)
	if len(defaults) != 1 {
		msg := "spec.provider is empty and no ProviderClass is the default (annotation " + vmv1.AnnotationDefaultClass + "=\"true\"); set spec.provider or ask an admin to mark one"
		if len(defaults) > 1 {
			msg = fmt.Sprintf("spec.provider is empty and %d ProviderClasses claim to be the default (%v); set spec.provider or ask an admin to keep one", len(defaults), defaults)
		}
		return false, verdict{blocked: true, cond: metav1.Condition{Type: vmv1.ConditionProviderAvailable, Status: metav1.ConditionFalse,
			Reason: ReasonNoDefaultProvider, Message: msg, ObservedGeneration: vm.Generation}}, nil
	}
	patched := vm.DeepCopy()
	patched.Spec.Provider = vmv1.Provider(defaults[0])
	if err := r.Client.Patch(ctx, patched, client.MergeFromWithOptions(vm, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return true, verdict{}, nil // a newer VM is on its way
		}
		return false, verdict{}, r.fail("default-provider", err)
	}
	// No event of its own: the spec shows the default, and the CreatedPod event names the
	// provider, so each new VM costs one API request less.
	return true, verdict{}, nil
}

// emulationCondition says plainly whether the guest is emulated.
func emulationCondition(vm *vmv1.VirtualMachine) metav1.Condition {
	if vm.Spec.Acceleration == vmv1.AccelerationEmulated {
		return metav1.Condition{Type: vmv1.ConditionSoftwareEmulation, Status: metav1.ConditionTrue, Reason: ReasonEmulationRequested,
			Message: "the guest runs under software emulation (QEMU TCG), many times slower than with KVM, because the VM asked for it", ObservedGeneration: vm.Generation}
	}
	return metav1.Condition{Type: vmv1.ConditionSoftwareEmulation, Status: metav1.ConditionFalse, Reason: ReasonHardwareVirt,
		Message: "the guest runs with KVM", ObservedGeneration: vm.Generation}
}

// whyNot adds virtpod's own account to an unschedulable pod's Scheduled condition: which nodes
// lack what this VM needs, from the node agents' reports.
func (r *Reconciler) whyNot(ctx context.Context, st *vmv1.VirtualMachineStatus, vm *vmv1.VirtualMachine, class *vmv1.ProviderClass) error {
	c := meta.FindStatusCondition(st.Conditions, vmv1.ConditionScheduled)
	if c == nil || c.Reason != ReasonUnschedulable || class == nil {
		return nil
	}
	hvs := &vmv1.HypervisorNodeList{}
	if err := r.Client.List(ctx, hvs); err != nil {
		return r.fail("list-hypervisornodes", err)
	}
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes); err != nil {
		return r.fail("list-nodes", err)
	}
	byName := make(map[string]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		byName[nodes.Items[i].Name] = &nodes.Items[i]
	}
	fit := providerclass.Evaluate(class, vm.Spec.Acceleration, hvs.Items, byName, r.now())
	c.Message = fmt.Sprintf("%s; virtpod: %s", c.Message, fit.Summary())
	return nil
}
