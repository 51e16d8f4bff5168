package podspec_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	goldenfile "github.com/virtpod/virtpod/tests/golden"
)

// runningSource is a masquerade VM's runner pod as the API server holds it once it runs on
// node-1, mid-resize-free, with the annotations of its life so far.
func runningSource(t *testing.T, mutate func(*vmv1.VirtualMachine)) *corev1.Pod {
	t.Helper()
	vm := baseVM()
	vm.Spec.Guest.NetworkMode = vmv1.NetworkMasquerade
	if mutate != nil {
		mutate(vm)
	}
	pod := podspec.Build(vm, podspec.DefaultOptions())
	pod.UID = "src-uid"
	pod.Spec.NodeName = "node-1"
	pod.Annotations = map[string]string{
		"vm.virtpod.io/restart-count": "0",
		vmv1.AnnotationGuestCPUs:      "2", vmv1.AnnotationMigrateTo: "10.0.0.2:9440/x", vmv1.AnnotationMigration: "old",
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.7"}
	return pod
}

func migration(target string) *vmv1.VirtualMachineMigration {
	return &vmv1.VirtualMachineMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web-move", UID: "7d1c2b9e-aaaa-bbbb-cccc-ddddeeeeffff"},
		Spec:       vmv1.VirtualMachineMigrationSpec{VMName: "web", TargetNode: target},
	}
}

func TestMigrationTargetGolden(t *testing.T) {
	src := runningSource(t, nil)
	before := src.DeepCopy()
	// A source started before its machine was pinned: the target gets the pinned one. The VM's
	// runner image changed since: the target runs the new runner, on the source's kernel and disk.
	target := podspec.TargetPod(src, migration(""), "pc-q35-7.2", "registry.example.com/virtpod/runner:v2")
	if have, had := podspec.PodImages(target), podspec.PodImages(src); have.Runner != "registry.example.com/virtpod/runner:v2" || have.Kernel != had.Kernel || have.RootDisk != had.RootDisk {
		t.Errorf("target's images %+v, source's %+v: want the new runner and the source's kernel and disk", have, had)
	}
	got, err := yaml.Marshal(target)
	if err != nil {
		t.Fatal(err)
	}
	goldenfile.Check(t, "migration-target.golden.yaml", got)
	if s, _ := yaml.Marshal(src); string(s) != string(must(yaml.Marshal(before))) {
		t.Error("TargetPod modified the source pod")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestMigrationTargetPlacement: the target goes to spec.targetNode when given, else anywhere but
// the source's node, in every required term of the user's affinity (terms are ORed).
func TestMigrationTargetPlacement(t *testing.T) {
	src := runningSource(t, func(vm *vmv1.VirtualMachine) {
		vm.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}},
			}}}}
	})
	for target, want := range map[string]corev1.NodeSelectorRequirement{
		"":       {Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"node-1"}},
		"node-9": {Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-9"}},
	} {
		pod := podspec.TargetPod(src, migration(target), "", "")
		terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) != 2 {
			t.Fatalf("target %q: %d terms, want the user's 2", target, len(terms))
		}
		for i, term := range terms {
			if len(term.MatchFields) != 1 || term.MatchFields[0].Operator != want.Operator || term.MatchFields[0].Values[0] != want.Values[0] {
				t.Errorf("target %q: term %d has fields %+v, want %+v", target, i, term.MatchFields, want)
			}
		}
		if pod.Spec.NodeName != "" {
			t.Errorf("target %q: bound to %s before scheduling", target, pod.Spec.NodeName)
		}
		if n := strings.Count(strings.Join(pod.Spec.Containers[0].Args, " "), podspec.IncomingFlag); n != 1 {
			t.Errorf("target %q: %d %s flags, want 1", target, n, podspec.IncomingFlag)
		}
	}
	if src.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields != nil {
		t.Error("TargetPod modified the source pod's affinity")
	}

	// Back again: the guest moved to node-2 leaves it for anywhere but node-2, node-1 included
	// (the first move's placement is replaced, not kept beside the second's).
	moved := podspec.TargetPod(src, migration(""), "pc-q35-7.2", "")
	moved.Spec.NodeName = "node-2"
	back := podspec.TargetPod(moved, migration(""), "pc-q35-7.2", "")
	// The machine is given once, however often the guest moves.
	if n := countPrefix(back.Spec.Containers[0].Args, podspec.MachineFlag+"="); n != 1 {
		t.Errorf("second move: %d --machine arguments in %q, want 1", n, back.Spec.Containers[0].Args)
	}
	for i, term := range back.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if len(term.MatchFields) != 1 || term.MatchFields[0].Operator != corev1.NodeSelectorOpNotIn || term.MatchFields[0].Values[0] != "node-2" {
			t.Errorf("second move: term %d has fields %+v, want only NotIn [node-2]", i, term.MatchFields)
		}
		if len(term.MatchExpressions) == 0 || term.MatchExpressions[0].Key != "zone" {
			t.Errorf("second move: term %d lost the user's expressions: %+v", i, term.MatchExpressions)
		}
	}
}

func countPrefix(args []string, prefix string) int {
	n := 0
	for _, a := range args {
		if strings.HasPrefix(a, prefix) {
			n++
		}
	}
	return n
}

// TestTargetPodName: deterministic, different per migration, a DNS label for the longest VM name.
func TestTargetPodName(t *testing.T) {
	long := strings.Repeat("a", 56)
	a, b := podspec.TargetPodName(long, "uid-1"), podspec.TargetPodName(long, "uid-2")
	if a != podspec.TargetPodName(long, "uid-1") || a == b {
		t.Errorf("names %q, %q: want deterministic and distinct", a, b)
	}
	if len(a) > 63 {
		t.Errorf("%q is %d characters, over a DNS label's 63", a, len(a))
	}
}
