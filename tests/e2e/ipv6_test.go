package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/virtpod/virtpod/pkg/podspec"
)

// clusterDNS6 is the local cluster's DNS Service's IPv6 address (tools/dev/localcluster).
const clusterDNS6 = "fd00:219::a"

// reachedOverIPv6 shows that a running pod-network VM is a dual-stack citizen: the guest takes
// its runner pod's IPv6 address (router advertisements and DHCPv6 from the runner, the fixture's
// dhclient) and another pod reaches its HTTP server there and through a dual-stack Service's
// IPv6 address. It lends itself to a VM booted for other checks.
func reachedOverIPv6(t *testing.T, ns, vm string) {
	t.Helper()
	ctx := context.Background()
	pod := podspec.PodName(vm)
	var ip6 string
	for _, ip := range runnerPod(t, ns, vm).Status.PodIPs {
		if a := net.ParseIP(ip.IP); a != nil && a.To4() == nil {
			ip6 = ip.IP
		}
	}
	if ip6 == "" {
		t.Fatalf("runner pod %s has no IPv6 address: the local cluster is dual-stack", pod)
	}
	// The guest's DHCPv6 lease carries the cluster DNS's IPv6 address (the kubelet's second
	// clusterDNS, in the pod's resolv.conf).
	eventually(t, "the guest's IPv6 address in its console", 2*time.Minute, func() error {
		return contains(podLogs(ns, pod), "VIRTPOD-GUEST-IPV6 "+ip6+" dns="+clusterDNS6)
	})
	dual := corev1.IPFamilyPolicyRequireDualStack
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vm + "-dual"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": vm}, IPFamilyPolicy: &dual,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}}}
	if err := kube.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("dual-stack Service %s has addresses %v", svc.Name, svc.Spec.ClusterIPs)
	}
	// One client pod asks both: the pod's address, then the Service's.
	got := runPod(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "client6"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "http", Image: "localhost/virtpod/toolbox:dev",
			Command: []string{"sh", "-c", fmt.Sprintf("echo '--- %s'\n%s\necho '--- %s'\n%s", ip6, askGuest(ip6, 80, "/"), svc.Spec.ClusterIPs[1], askGuest(svc.Spec.ClusterIPs[1], 80, "/"))}}}},
	})
	if n := strings.Count(got, "virtpod guest "+vm); n != 2 {
		t.Errorf("over IPv6 at the pod's address %s and the Service's %s: %d answers, want 2:\n%s", ip6, svc.Spec.ClusterIPs[1], n, got)
	}
}
