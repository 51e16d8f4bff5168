package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestSecurityAdmission: on the cluster as installed from config/local, a VM naming a runner
// image its ProviderClass does not list is refused with the list, and a privileged pod in a VM
// namespace (Pod Security restricted, which the runner pods pass) is refused.
func TestSecurityAdmission(t *testing.T) {
	parallelSafe(t)
	ns := namespace(t)
	// The policy reads its ProviderClasses through an informer: give a fresh install a moment.
	eventually(t, "a VM naming an unlisted runner image refused with the allowed list", time.Minute, func() error {
		vm := newVM(ns, "evil-runner")
		vm.Spec.RunnerImage = "evil.example.com/runner:v1"
		err := kube.Create(context.Background(), vm, client.DryRunAll)
		if err == nil {
			return fmt.Errorf("admitted")
		}
		// The release's own QEMU 7.2 runner by digest, then the local cluster's (config/local-settings).
		return contains(err.Error(), "allowed: "+readLock(t, release)["virtpod/runner-debian12"].Digest+", localhost/virtpod/runner, localhost/virtpod/runner-debian12, localhost/virtpod/runner-nohypervisor")
	})

	// The VMs' namespaces enforce Pod Security restricted, and every VM of these tests runs there;
	// what a runner pod used to need (root with NET_ADMIN, NET_RAW and MKNOD) is refused there.
	// (A privileged pod the local cluster's --allow-privileged=false refuses before Pod Security.)
	root := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "net-admin"}, Spec: corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](0)},
		Containers: []corev1.Container{{Name: "c", Image: "localhost/virtpod/toolbox:dev",
			SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW", "MKNOD"}}}}}}}
	err := kube.Create(context.Background(), root)
	if err == nil || !strings.Contains(err.Error(), `violates PodSecurity "restricted`) {
		t.Errorf("a root pod with the runner's old capabilities in a VM namespace: %v, want Pod Security restricted's refusal", err)
	}
}
