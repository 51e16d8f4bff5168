package podspec

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// IncomingFlag makes a runner a migration target: QEMU waits for the guest's state on the
// control directory's migrate-in socket instead of booting (runnerconfig's --incoming).
const IncomingFlag = "--incoming"

// MachineFlag is runnerconfig's --machine: the machine type QEMU builds.
const MachineFlag = "--machine"

// TargetPodName is the target runner pod of a migration: <vm>-m<5 hex digits of the migration's
// UID's SHA-256>, deterministic so a repeated reconcile finds the pod it made, and a DNS label
// (a VM's name is at most 56 characters).
func TargetPodName(vmName string, migration types.UID) string {
	sum := sha256.Sum256([]byte(migration))
	return vmName + "-m" + hex.EncodeToString(sum[:])[:5]
}

// sourceOnly are annotations of one runner pod's own life that a target must not inherit: the
// live-resize and suspend conversations with its node agent and the migration protocol.
var sourceOnly = map[string]bool{
	vmv1.AnnotationDesiredCPUs: true, vmv1.AnnotationDesiredMemory: true,
	vmv1.AnnotationGuestCPUs: true, vmv1.AnnotationGuestMemory: true, vmv1.AnnotationResizeError: true,
	vmv1.AnnotationMigrationReceiver: true, vmv1.AnnotationMigrateTo: true,
	vmv1.AnnotationMigrationState: true, vmv1.AnnotationMigrationResume: true, vmv1.AnnotationMigrationBandwidth: true,
	vmv1.AnnotationSuspend: true, vmv1.AnnotationSuspendError: true,
}

// TargetPod renders the target runner pod of migration mig from the source runner pod src: the
// same spec (images, volumes, the resources it has now, the runner's arguments plus --incoming
// and, when the source's lack it, --machine=machine: the VM's pinned machine type), except the
// runner container's image, which is runnerImage when given (the VM's effective one: a guest
// moves onto the current runner, which is how imageUpdatePolicy LiveMigrate updates it; the
// kernel and disk images stay the source's, which the guest runs from), unbound, and kept off
// the source's node by node affinity in every required term (or sent to mig's targetNode), and
// with the claims mig copies (status.claims) replaced by those it made for the target, and
// without the state claim and the suspend and resume flags (withoutState).
// Labels are the source's plus the target role, so Services select it once it runs the guest.
// Pure.
func TargetPod(src *corev1.Pod, mig *vmv1.VirtualMachineMigration, machine, runnerImage string) *corev1.Pod {
	pod := &corev1.Pod{TypeMeta: src.TypeMeta}
	pod.Name = TargetPodName(mig.Spec.VMName, mig.UID)
	pod.Namespace = src.Namespace
	pod.OwnerReferences = src.DeepCopy().OwnerReferences
	pod.Labels = map[string]string{}
	for k, v := range src.Labels {
		pod.Labels[k] = v
	}
	pod.Labels[vmv1.LabelMigrationRole] = vmv1.MigrationRoleTarget
	pod.Annotations = map[string]string{}
	for k, v := range src.Annotations {
		if !sourceOnly[k] && !strings.HasPrefix(k, "kubectl.kubernetes.io/") {
			pod.Annotations[k] = v
		}
	}
	pod.Annotations[vmv1.AnnotationMigration] = string(mig.UID)

	spec := src.Spec.DeepCopy()
	withTargetClaims(spec, mig)
	withoutState(spec)
	spec.NodeName = ""
	spec.EphemeralContainers = nil
	if c := runnerpod.ContainerIn(spec); c != nil {
		if runnerImage != "" {
			c.Image = runnerImage
		}
		if !slices.Contains(c.Args, IncomingFlag) {
			c.Args = append(c.Args, IncomingFlag)
		}
		if _, pinned := runnerpod.Value(src, MachineFlag); machine != "" && !pinned {
			// A source started before its machine was pinned ran q35 on its QEMU, which the
			// pinned machine names.
			c.Args = append(c.Args, MachineFlag+"="+machine)
		}
	}
	field := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{src.Spec.NodeName}}
	if mig.Spec.TargetNode != "" {
		field = corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{mig.Spec.TargetNode}}
	}
	if src.Annotations[annotationPlaced] == "true" {
		// The source was itself a target: its placement was that migration's, not the VM's.
		spec.Affinity = withoutNodeField(spec.Affinity)
	}
	spec.Affinity = withNodeField(spec.Affinity, field)
	pod.Annotations[annotationPlaced] = "true"
	pod.Spec = *spec
	return pod
}

// annotationPlaced marks a pod whose required node terms each end in the node field a
// migration added (withNodeField), so a later migration from it replaces that field rather
// than adding its own beside it: a guest moved from node a to b must be able to go back to a.
const annotationPlaced = "vm.virtpod.io/migration-placed"

// withoutNodeField removes what withNodeField added: the last field requirement of each
// required term, and the one term it made when there was none.
func withoutNodeField(a *corev1.Affinity) *corev1.Affinity {
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return a
	}
	req := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if len(req.NodeSelectorTerms) == 1 && len(req.NodeSelectorTerms[0].MatchExpressions) == 0 && len(req.NodeSelectorTerms[0].MatchFields) == 1 {
		a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = nil
		return a
	}
	for i := range req.NodeSelectorTerms {
		if f := req.NodeSelectorTerms[i].MatchFields; len(f) > 0 && f[len(f)-1].Key == "metadata.name" {
			req.NodeSelectorTerms[i].MatchFields = f[:len(f)-1]
		}
	}
	return a
}

// withNodeField adds req to every required node-selector term (an empty one, which matches
// nothing, stays empty), or makes the one term.
func withNodeField(a *corev1.Affinity, req corev1.NodeSelectorRequirement) *corev1.Affinity {
	if a == nil {
		a = &corev1.Affinity{}
	}
	if a.NodeAffinity == nil {
		a.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := a.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
		na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields = []corev1.NodeSelectorRequirement{req}
		return a
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		if len(terms[i].MatchExpressions) == 0 && len(terms[i].MatchFields) == 0 {
			continue
		}
		terms[i].MatchFields = append(terms[i].MatchFields, req)
	}
	return a
}

// IsTarget says whether pod was made to receive a migrating guest.
func IsTarget(pod *corev1.Pod) bool {
	return pod.Labels[vmv1.LabelMigrationRole] == vmv1.MigrationRoleTarget
}
