package e2e

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// podsMade counts the VM's runner pods, ended and deleting ones too.
func (m *mover) podsMade() int {
	m.t.Helper()
	pods := &corev1.PodList{}
	if err := kube.List(m.ctx, pods, client.InNamespace(m.ns), client.MatchingLabels{"app": m.name}); err != nil {
		m.t.Fatal(err)
	}
	return len(pods.Items)
}

// runnerPods are the VM's runner pods that are not being deleted.
func (m *mover) runnerPods() []corev1.Pod {
	pods := &corev1.PodList{}
	if err := kube.List(m.ctx, pods, client.InNamespace(m.ns), client.MatchingLabels{"app": m.name}); err != nil {
		m.t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			live = append(live, p)
		}
	}
	return live
}

// answersIPv6: the moved guest answers in IPv6 from its new node.
func (m *mover) answersIPv6(svc *corev1.Service, mig *vmv1.VirtualMachineMigration) {
	m.t.Helper()
	// It answers in IPv6 from its new node, through the Service's IPv6 address, once the
	// Service sends there: its IPv6 endpoint is the target pod's, ready. Under load the first
	// tries right after the move can still meet "No route to host" (seen in a CI run and beside
	// the tenant test's boots). On this cluster that is a connection sent to an address nobody
	// answers for: neighbour discovery gives up after 3 s (a Service whose endpoint is an unheld
	// address of the node's pod range does exactly that, measured 2026-12-05), while kube-proxy's
	// reject of a Service without endpoints is "Connection refused" after 1 s. So the client's
	// node still sent to the source pod's departed address (kube-proxy not yet synced to the new
	// endpoint), or the target's address was not yet answered for; which one is not known. The
	// client tries once a second for a minute and the test logs which try worked.
	eventually(m.t, "the Service's IPv6 endpoint the target pod, ready", time.Minute, func() error {
		var slices6 discoveryv1.EndpointSliceList
		if err := kube.List(m.ctx, &slices6, client.InNamespace(m.ns), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
			return err
		}
		for _, es := range slices6.Items {
			for _, e := range es.Endpoints {
				if es.AddressType == discoveryv1.AddressTypeIPv6 && e.TargetRef != nil && e.TargetRef.Name == mig.Status.TargetPod &&
					e.Conditions.Ready != nil && *e.Conditions.Ready {
					return nil
				}
			}
		}
		return fmt.Errorf("no ready IPv6 endpoint of pod %s in %d EndpointSlices", mig.Status.TargetPod, len(slices6.Items))
	})
	ip6 := svc.Spec.ClusterIPs[1]
	out := runPod(m.t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: m.ns, Name: "mover-client6"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "http", Image: "localhost/virtpod/toolbox:dev",
			Command: []string{"sh", "-c", fmt.Sprintf(`i=0; while [ $i -lt 60 ]; do i=$((i+1)); `+
				`if out=$(printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 %s 80) && [ -n "$out" ]; then echo "attempt $i"; echo "$out"; exit 0; fi; sleep 1; done; exit 1`, ip6)}}}}})
	m.t.Logf("the moved guest through the Service's IPv6 address: %s", strings.SplitN(out, "\n", 2)[0])
	if err := contains(out, "virtpod guest mover"); err != nil {
		m.t.Errorf("the moved guest through the Service's IPv6 address %s: %v", ip6, err)
	}
}
