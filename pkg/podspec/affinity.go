package podspec

import (
	"sort"

	corev1 "k8s.io/api/core/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// nodeRequirements are what a runner pod needs of its node: linux/amd64 (the runner image), the
// hypervisor it asked for and a working KVM — or emulation, when it asked for that — as the
// node agent labels them, and the class's node selector. A VM lands only where all of it is.
func nodeRequirements(vm *vmv1.VirtualMachine, class *vmv1.ProviderClass) []corev1.NodeSelectorRequirement {
	in := func(key, value string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{value}}
	}
	reqs := []corev1.NodeSelectorRequirement{
		in(corev1.LabelOSStable, "linux"),
		in(corev1.LabelArchStable, "amd64"),
		in(vmv1.LabelProviderPrefix+string(vm.Spec.Provider), "true"),
	}
	if vm.Spec.Acceleration == vmv1.AccelerationEmulated {
		reqs = append(reqs, in(vmv1.LabelEmulation, "true"))
	} else {
		reqs = append(reqs, in(vmv1.LabelKVM, "true"))
	}
	if class != nil && class.Spec.Scheduling != nil {
		keys := make([]string, 0, len(class.Spec.Scheduling.NodeSelector))
		for k := range class.Spec.Scheduling.NodeSelector {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			reqs = append(reqs, in(k, class.Spec.Scheduling.NodeSelector[k]))
		}
	}
	return reqs
}

// affinity returns the user's affinity with reqs added to every required node-selector term.
// Terms are ORed, so adding reqs as a term of their own would loosen the user's choice; adding
// them to each term tightens it. An empty term matches no node and is left as it is.
func affinity(user *corev1.Affinity, reqs []corev1.NodeSelectorRequirement) *corev1.Affinity {
	a := user.DeepCopy()
	if a == nil {
		a = &corev1.Affinity{}
	}
	if a.NodeAffinity == nil {
		a.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := a.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
		len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{}},
		}
		na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions = reqs
		return a
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		if len(terms[i].MatchExpressions) == 0 && len(terms[i].MatchFields) == 0 {
			continue
		}
		terms[i].MatchExpressions = append(terms[i].MatchExpressions, reqs...)
	}
	return a
}
