package vm

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/guestagent"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// agentView is what the running guest's agent said, as its runner pod carries it.
type agentView struct {
	condition cause
	connected bool
	facts     guestagent.Facts
}

// maxFactsAnnotation bounds the annotation read: anyone who may patch the pod can write it.
const maxFactsAnnotation = 64 << 10

// guestAgent reads the guest-facts annotation the node agent writes on the running guest's
// pod (agent/facts). Pure.
func guestAgent(vm *vmv1.VirtualMachine, pod *corev1.Pod) *agentView {
	if vm.Spec.Provider != vmv1.ProviderQEMU {
		return &agentView{condition: cause{vmv1.ReasonAgentNotSupported, fmt.Sprintf("provider %s gives the guest no agent channel; provider qemu does", vm.Spec.Provider)}}
	}
	if !runnerpod.Has(pod, runnerconfig.GuestAgentFlag) {
		return &agentView{condition: cause{vmv1.ReasonAgentNotSupported, fmt.Sprintf("runner pod %s was made before guests had an agent channel; the guest gets one at its next start", pod.Name)}}
	}
	waiting := cause{vmv1.ReasonAgentNotConnected, "no qemu-guest-agent answers in the guest (yet): install and start it there (Debian and Ubuntu: the qemu-guest-agent package)"}
	raw := pod.Annotations[vmv1.AnnotationGuestFacts]
	var g controlapi.Guest
	if raw == "" || len(raw) > maxFactsAnnotation || json.Unmarshal([]byte(raw), &g) != nil || !g.Connected {
		if g.Error != "" && len(raw) <= maxFactsAnnotation {
			waiting.message += "; the last try: " + guestagent.CleanText(g.Error)
		}
		return &agentView{condition: waiting}
	}
	f := guestagent.Facts{OS: g.OS, Hostname: g.Hostname, Interfaces: g.Interfaces, Bootstrap: g.Bootstrap}.Cleaned()
	msg := "qemu-guest-agent answers in the guest"
	if f.OS != nil && f.OS.PrettyName != "" {
		msg += ", which runs " + f.OS.PrettyName
	}
	return &agentView{condition: cause{vmv1.ReasonAgentConnected, msg}, connected: true, facts: f}
}

// setAgentConnected: whether the running guest's agent answers, with what it said in
// status.guest (after setResized made it); both are removed while no guest runs (a nil).
func setAgentConnected(st *vmv1.VirtualMachineStatus, generation int64, a *agentView) {
	if a == nil || st.Guest == nil {
		meta.RemoveStatusCondition(&st.Conditions, vmv1.ConditionAgentConnected)
		return
	}
	c := metav1.Condition{Type: vmv1.ConditionAgentConnected, Status: metav1.ConditionFalse, ObservedGeneration: generation,
		Reason: a.condition.reason, Message: a.condition.message}
	if a.connected {
		c.Status = metav1.ConditionTrue
		st.Guest.OS, st.Guest.Hostname, st.Guest.Interfaces = a.facts.OS, a.facts.Hostname, a.facts.Interfaces
		st.Guest.Bootstrap = a.facts.Bootstrap
	}
	meta.SetStatusCondition(&st.Conditions, c)
}
