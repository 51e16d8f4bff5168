package podspec

import (
	corev1 "k8s.io/api/core/v1"
)

// nodeRequirements are what every runner pod needs of its node: the runner image is built for
// linux/amd64.
func nodeRequirements() []corev1.NodeSelectorRequirement {
	return []corev1.NodeSelectorRequirement{
		{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}},
		{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
	}
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
