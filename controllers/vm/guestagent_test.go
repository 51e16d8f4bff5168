package vm

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestAgentConnected reads the pod's guest-facts annotation as Reconcile does (guestAgent, then
// setAgentConnected after setResized) for each state a guest's agent can be in.
func TestAgentConnected(t *testing.T) {
	withChannel := func(facts string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers = []corev1.Container{{Name: vmv1.RunnerContainer, Args: []string{"--name=web", "--guest-agent"}}}
			if facts != "" {
				p.Annotations = map[string]string{vmv1.AnnotationGuestFacts: facts}
			}
		}
	}
	oldRunner := func(p *corev1.Pod) {
		p.Spec.Containers = []corev1.Container{{Name: vmv1.RunnerContainer, Args: []string{"--name=web"}}}
	}
	notYet := "no qemu-guest-agent answers in the guest (yet): install and start it there (Debian and Ubuntu: the qemu-guest-agent package)"
	debian := `{"channel":true,"connected":true,"os":{"id":"debian","prettyName":"Debian GNU/Linux 12 (bookworm)","kernelRelease":"6.1.0-40-cloud-amd64"},` +
		`"hostname":"web","interfaces":[{"name":"eth0","mac":"52:54:00:00:00:01","ips":["10.0.2.2/24","fe80::1/64"]}]}`
	for _, tc := range []struct {
		name     string
		provider vmv1.Provider
		pod      *corev1.Pod // nil: no guest runs
		cond     *want       // nil: no AgentConnected condition
		hostname string
	}{
		{name: "no guest"},
		{name: "cloud-hypervisor", provider: vmv1.ProviderCloudHypervisor, pod: pod(withChannel("")),
			cond: &want{"False", vmv1.ReasonAgentNotSupported, "provider cloud-hypervisor gives the guest no agent channel; provider qemu does"}},
		{name: "a runner pod from before the channel", pod: pod(oldRunner),
			cond: &want{"False", vmv1.ReasonAgentNotSupported, "runner pod web-runner was made before guests had an agent channel; the guest gets one at its next start"}},
		{name: "not asked yet", pod: pod(withChannel("")), cond: &want{"False", vmv1.ReasonAgentNotConnected, notYet}},
		{name: "no agent in the guest", pod: pod(withChannel(`{"channel":true}`)), cond: &want{"False", vmv1.ReasonAgentNotConnected, notYet}},
		{name: "the agent failed", pod: pod(withChannel(`{"channel":true,"error":"the guest agent did not answer\u0007"}`)),
			cond: &want{"False", vmv1.ReasonAgentNotConnected, notYet + "; the last try: the guest agent did not answer"}},
		{name: "not JSON", pod: pod(withChannel(`{"connected":tru`)), cond: &want{"False", vmv1.ReasonAgentNotConnected, notYet}},
		{name: "too long", pod: pod(withChannel(`{"connected":true,"hostname":"` + strings.Repeat("x", maxFactsAnnotation) + `"}`)),
			cond: &want{"False", vmv1.ReasonAgentNotConnected, notYet}},
		{name: "connected", pod: pod(withChannel(debian)), hostname: "web",
			cond: &want{"True", vmv1.ReasonAgentConnected, "qemu-guest-agent answers in the guest, which runs Debian GNU/Linux 12 (bookworm)"}},
	} {
		vm := &vmv1.VirtualMachine{Spec: vmv1.VirtualMachineSpec{Provider: vmv1.ProviderQEMU}}
		if tc.provider != "" {
			vm.Spec.Provider = tc.provider
		}
		// From a status that had both, so a setter that only sets (or only clears) fails.
		st := vmv1.VirtualMachineStatus{Guest: &vmv1.GuestStatus{CPUs: 1, Hostname: "stale"},
			Conditions: []metav1.Condition{{Type: vmv1.ConditionAgentConnected, Status: metav1.ConditionUnknown, Reason: "Old"}}}
		var a *agentView
		if tc.pod != nil {
			a = guestAgent(vm, tc.pod)
			st.Guest = &vmv1.GuestStatus{CPUs: 1} // setResized's, fresh each reconcile
		} else {
			st.Guest = nil
		}
		setAgentConnected(&st, 7, a)
		if tc.cond == nil {
			if c := meta.FindStatusCondition(st.Conditions, vmv1.ConditionAgentConnected); c != nil {
				t.Errorf("%s: AgentConnected %+v, want none", tc.name, c)
			}
			continue
		}
		check(t, tc.name, st.Conditions, vmv1.ConditionAgentConnected, *tc.cond)
		if st.Guest.Hostname != tc.hostname {
			t.Errorf("%s: status.guest.hostname %q, want %q", tc.name, st.Guest.Hostname, tc.hostname)
		}
		if tc.hostname != "" && (st.Guest.OS == nil || st.Guest.OS.ID != "debian" || len(st.Guest.Interfaces) != 1 || len(st.Guest.Interfaces[0].IPs) != 2) {
			t.Errorf("%s: status.guest %+v", tc.name, st.Guest)
		}
	}
}
