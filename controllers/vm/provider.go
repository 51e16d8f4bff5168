package vm

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/providerclass"
)

// verdict is what the VM's ProviderClass allows.
type verdict struct {
	class   *vmv1.ProviderClass // nil when there is none to use
	blocked bool                // no new runner pod may start
	why     cause               // ProviderAvailable's reason and message
}

// provider reads the VM's ProviderClass and says whether a new pod may start. A VM with no
// provider has none resolved yet: see defaultProvider.
func (r *Reconciler) provider(ctx context.Context, vm *vmv1.VirtualMachine) (verdict, error) {
	class := &vmv1.ProviderClass{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: string(vm.Spec.Provider)}, class); apierrors.IsNotFound(err) {
		class = nil
	} else if err != nil {
		return verdict{}, r.fail("get-providerclass", err)
	}
	return judge(vm, class), nil
}

// judge says what class (nil when it does not exist) allows the VM.
func judge(vm *vmv1.VirtualMachine, class *vmv1.ProviderClass) verdict {
	name := string(vm.Spec.Provider)
	block := func(reason, format string, args ...any) verdict {
		return verdict{class: class, blocked: true, why: cause{reason, fmt.Sprintf(format, args...)}}
	}
	if class == nil {
		return block(vmv1.ReasonProviderNotFound, "ProviderClass %s does not exist, so no node is offered for it; an admin creates it (kubectl get providerclasses lists those there are)", name)
	}
	if class.Spec.Enabled != nil && !*class.Spec.Enabled {
		msg := fmt.Sprintf("ProviderClass %s is disabled by an admin", name)
		if class.Spec.DisabledReason != "" {
			msg += ": " + class.Spec.DisabledReason
		}
		return block(vmv1.ReasonProviderDisabled, "%s; a running guest keeps running, but none starts until it is enabled (vmctl provider enable %s)", msg, name)
	}
	if vm.Spec.Acceleration == vmv1.AccelerationEmulated && !class.Spec.AllowEmulation {
		return block(vmv1.ReasonEmulationNotAllowed, "the VM asks for software emulation and ProviderClass %s does not allow it (spec.allowEmulation); use acceleration KVM or ask an admin", name)
	}
	if img := vm.Spec.RunnerImage; !class.Spec.AllowsRunnerImage(img) {
		// Admission refuses this (config/admission); a VM stored before the policy, or whose
		// class changed since, is held here: the runner runs with NET_ADMIN and /dev/kvm.
		return block(vmv1.ReasonRunnerImageNotAllowed, "spec.runnerImage %s is not allowed by ProviderClass %s (allowed: %s); remove spec.runnerImage to use the class's runner image, or ask an admin to add it to the class's spec.allowedRunnerImages",
			img, name, allowedList(class))
	}
	if lacks := class.Spec.RunnerLacks(&vm.Spec); len(lacks) > 0 && (vm.Spec.RunnerImage == "" || vm.Spec.RunnerImage == class.Spec.RunnerImage) {
		// The runner would refuse it after a pod: refused here, no pod, no restart loop.
		return block(vmv1.ReasonRunnerLacksFeature, "%s; ProviderClass %s's runner image lacks it (its spec.runnerFeatures: %s): %s, name a runner image that has it in spec.runnerImage (allowed: %s), or ask an admin for a class whose runner has it",
			needs(lacks[0]), name, features(class.Spec.RunnerFeatures), without(lacks[0]), allowedList(class))
	}
	v := verdict{class: class, why: cause{vmv1.ReasonProviderAvailable, fmt.Sprintf("ProviderClass %s is enabled", name)}}
	if c := meta.FindStatusCondition(class.Status.Conditions, vmv1.ConditionAvailable); c != nil {
		v.why.message += "; " + c.Message
	}
	return v
}

// announceProvider tells, once per cause, that no runner pod starts because of the VM's class:
// only the reconcile whose guarded status write changed ProviderAvailable gets here with it.
func (r *Reconciler) announceProvider(vm, next *vmv1.VirtualMachine) {
	now := meta.FindStatusCondition(next.Status.Conditions, vmv1.ConditionProviderAvailable)
	if now == nil || now.Status != metav1.ConditionFalse {
		return
	}
	if was := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionProviderAvailable); was != nil && was.Status == now.Status && was.Reason == now.Reason {
		return
	}
	r.Recorder.Eventf(vm, nil, corev1.EventTypeWarning, now.Reason, "Start", "No runner pod starts: %s", now.Message)
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
		return false, noDefault(defaults), nil
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

// noDefault says why a VM that names no provider gets none: not exactly one class is the
// default.
func noDefault(defaults []string) verdict {
	msg := "spec.provider is empty and no ProviderClass is the default (annotation " + vmv1.AnnotationDefaultClass + "=\"true\"); set spec.provider or ask an admin to mark one"
	if len(defaults) > 1 {
		msg = fmt.Sprintf("spec.provider is empty and %d ProviderClasses claim to be the default (%v); set spec.provider or ask an admin to keep one", len(defaults), defaults)
	}
	return verdict{blocked: true, why: cause{vmv1.ReasonNoDefaultProvider, msg}}
}

// whyNot is virtpod's own account of the nodes for a pod the scheduler cannot place: which lack
// what this VM needs, from the node agents' reports, and which node a claim's volume ties the
// pod to ("" when not asked for).
func (r *Reconciler) whyNot(ctx context.Context, vm *vmv1.VirtualMachine, pod *corev1.Pod, class *vmv1.ProviderClass) (string, error) {
	if !unschedulable(pod) {
		return "", nil
	}
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes); err != nil {
		return "", r.fail("list-nodes", err)
	}
	byName := make(map[string]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		byName[nodes.Items[i].Name] = &nodes.Items[i]
	}
	var why []string
	if class != nil {
		hvs := &vmv1.HypervisorNodeList{}
		if err := r.Client.List(ctx, hvs); err != nil {
			return "", r.fail("list-hypervisornodes", err)
		}
		if s := providerclass.Evaluate(class, vm.Spec.Acceleration, hvs.Items, byName, r.now()).Summary(); s != "" {
			why = append(why, s)
		}
	}
	pinned, err := r.pinnedClaims(ctx, vm, byName)
	if err != nil {
		return "", err
	}
	return strings.Join(append(why, pinned...), "; "), nil
}

func allowedList(class *vmv1.ProviderClass) string {
	if len(class.Spec.AllowedRunnerImages) == 0 {
		return "none"
	}
	return strings.Join(class.Spec.AllowedRunnerImages, ", ")
}

// needs says what field needs feature f and what f is.
func needs(f vmv1.RunnerFeature) string {
	switch f {
	case vmv1.RunnerFeatureVirtioFS:
		return "spec.guest.filesystems needs a runner image with virtiofsd (runner feature VirtioFS)"
	}
	return "the VM needs runner feature " + string(f)
}

// without says how to do without feature f.
func without(f vmv1.RunnerFeature) string {
	switch f {
	case vmv1.RunnerFeatureVirtioFS:
		return "remove spec.guest.filesystems"
	}
	return "remove what needs it"
}

func features(fs []vmv1.RunnerFeature) string {
	if len(fs) == 0 {
		return "none"
	}
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}
