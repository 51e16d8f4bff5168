package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/virtpod/virtpod/pkg/podspec"
)

// TestPodResolvesService: the cluster has DNS (CoreDNS at the kubelet's clusterDNS, started by
// localcluster): a pod resolves a Service by its short name, through the search domains the
// kubelet wrote into its resolv.conf, and by its full name, and gets the Service's address.
func TestPodResolvesService(t *testing.T) {
	parallelSafe(t)
	ctx := context.Background()
	ns := namespace(t)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "named"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "none"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	if err := kube.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	full := "named." + ns + ".svc.cluster.local"
	out := runPod(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "resolver"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "dns", Image: "localhost/virtpod/toolbox:dev",
			// busybox's nslookup tries every search domain and fails when any answers
			// NXDOMAIN, so its output, not its exit code, is what counts.
			Command: []string{"sh", "-c", "cat /etc/resolv.conf; nslookup named; nslookup " + full + "; true"}}}},
	})
	if err := contains(out, "nameserver 10.219.0.10", "search "+ns+".svc.cluster.local"); err != nil {
		t.Fatal(err)
	}
	// Each lookup finds the Service's full name and prints its address once.
	if n := strings.Count(out, "Name:\t"+full+"\nAddress: "+svc.Spec.ClusterIP+"\n"); n != 2 {
		t.Fatalf("want the Service's address %s from both lookups, got %d:\n%s", svc.Spec.ClusterIP, n, out)
	}
	evs, err := kubeset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=MissingClusterDNS"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) > 0 {
		t.Fatalf("the kubelet still warns: %s", evs.Items[0].Message)
	}
}

// guestResolvesService shows that a guest resolves a Service by name: the runner hands the pod's
// nameserver (the cluster DNS) to the guest (the fixture takes it from ip=, a DHCP guest from its
// lease), and nslookup typed into the serial console (vmctl console) gets the Service's address;
// then a dual-stack Service's IPv6 address from the cluster DNS asked over IPv6.
// It needs a booted VM; the upgrade test lends one rather than booting another.
func guestResolvesService(t *testing.T, ns, vm string) {
	t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "resolved-by-guest"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "none"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	if err := kube.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	c := startPTY(t, filepath.Join(installVmctl(t), "vmctl"), "-n", ns, "console", vm)
	if err := c.waitFor(time.Minute, "Connected to the console of VM "+ns+"/"+vm); err != nil {
		t.Fatal(err)
	}
	// The answer, not the command typed, carries "Address: <ip>".
	lookup(t, c, "nslookup "+svc.Name+"."+ns+".svc.cluster.local", "Address: "+svc.Spec.ClusterIP)

	// Over IPv6: the cluster DNS's IPv6 address (the guest's DHCPv6 lease names it) answers a
	// dual-stack Service's name with both addresses.
	eventually(t, "the guest's IPv6 address", 2*time.Minute, func() error {
		return contains(podLogs(ns, podspec.PodName(vm)), "VIRTPOD-GUEST-IPV6 ")
	})
	dual := corev1.IPFamilyPolicyRequireDualStack
	svc6 := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "resolved-over-ipv6"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "none"}, IPFamilyPolicy: &dual,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	if err := kube.Create(ctx, svc6); err != nil {
		t.Fatal(err)
	}
	lookup(t, c, "nslookup "+svc6.Name+"."+ns+".svc.cluster.local "+clusterDNS6, "Address: "+svc6.Spec.ClusterIPs[1])
}

// lookup types cmd into the guest's shell until the console shows want.
func lookup(t *testing.T, c *ptyProc, cmd, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c.write(t, "cat /etc/resolv.conf; "+cmd+"\r")
		if c.waitFor(5*time.Second, want) == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest's %q did not print %q:\n%s", cmd, want, c.screen())
		}
	}
}
