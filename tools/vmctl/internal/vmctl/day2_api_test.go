package vmctl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// vmctlWithin runs vmctl with empty stdin and fails the test if it has not returned within d:
// a verb that cannot do its job must say so, never hang.
func vmctlWithin(t *testing.T, d time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	type result struct {
		o, e string
		code int
	}
	done := make(chan result, 1)
	go func() {
		var o, e bytes.Buffer
		c := RunIO(append([]string{"vmctl"}, args...), strings.NewReader(""), &o, &e)
		done <- result{o.String(), e.String(), c}
	}()
	select {
	case r := <-done:
		return r.o, r.e, r.code
	case <-time.After(d):
		t.Fatalf("vmctl %s still running after %v", strings.Join(args, " "), d)
		return "", "", 0
	}
}

// oneErrorLine checks stderr is exactly one line, an error containing each of want.
func oneErrorLine(t *testing.T, what, stderr string, code int, want ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], "error: ") {
		t.Errorf("%s: exit %d, stderr %q; want exit 1 and one error line", what, code, stderr)
		return
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("%s: stderr %q lacks %q", what, stderr, w)
		}
	}
}

// TestDay2VerbsRefuse: console, logs, port-forward and ssh against a missing VM, a VM without a
// pod, a VM whose pod is not running, an undeclared port, and as a user who may only read VMs
// and pods: each ends at once with one line saying why, and exit 1.
func TestDay2VerbsRefuse(t *testing.T) {
	kc := needAPI(t)
	ctx := context.Background()
	const ns = "day2"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// No controller runs here: write the VMs' status as it would.
	stopped := kubeapi.SampleVM(ns, "stopped")
	stopped.Spec.Guest.Ports = []vmv1.Port{{Name: "http", Port: 80}}
	createVMWithStatus(t, stopped, vmv1.VirtualMachineStatus{Phase: vmv1.PhaseSucceeded})
	pending := kubeapi.SampleVM(ns, "pending")
	pending.Spec.Guest.Ports = []vmv1.Port{{Name: "http", Port: 80}}
	createVMWithStatus(t, pending, vmv1.VirtualMachineStatus{Phase: vmv1.PhaseScheduling, PodName: "pending-runner"})
	createPod(t, ns, "pending-runner", nil)
	createVMWithStatus(t, kubeapi.SampleVM(ns, "nope-ports"), vmv1.VirtualMachineStatus{Phase: vmv1.PhaseRunning, PodName: "web-runner"})
	web := kubeapi.SampleVM(ns, "web")
	web.Spec.Guest.Ports = []vmv1.Port{{Name: "http", Port: 80}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}
	createVMWithStatus(t, web, vmv1.VirtualMachineStatus{Phase: vmv1.PhaseRunning, PodName: "web-runner"})
	createPod(t, ns, "web-runner", &corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: vmv1.RunnerContainer, Image: "runner", ImageID: "runner", Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
	}}})

	const limit = 30 * time.Second
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"console to a missing VM", []string{"console", "nope"}, []string{`VirtualMachine "nope" not found in namespace "day2"`}},
		{"console to a VM without a pod", []string{"console", "stopped"}, []string{"VM day2/stopped is Succeeded: it has no runner pod"}},
		{"console to a VM whose pod is pending", []string{"console", "pending"}, []string{"VM day2/pending is Scheduling: its runner pod pending-runner is Pending, not running"}},
		{"logs of a missing VM", []string{"logs", "nope"}, []string{`VirtualMachine "nope" not found`}},
		{"logs of a VM without a pod", []string{"logs", "-f", "stopped"}, []string{"VM day2/stopped is Succeeded: it has no runner pod"}},
		{"port-forward to a missing VM", []string{"port-forward", "nope", "8080:80"}, []string{`VirtualMachine "nope" not found`}},
		{"port-forward to a VM without a pod", []string{"port-forward", "stopped", "8080:80"}, []string{"VM day2/stopped is Succeeded: it has no runner pod"}},
		{"port-forward to a VM whose pod is pending", []string{"port-forward", "pending", "80"}, []string{"VM day2/pending is Scheduling: its runner pod pending-runner is Pending, not running"}},
		{"port-forward to a VM that declares no ports", []string{"port-forward", "nope-ports", "80"}, []string{"VM day2/nope-ports declares no ports, so the runner relays none"}},
		{"port-forward to an undeclared port", []string{"port-forward", "web", "8080:22"}, []string{"guest port 22/TCP is not declared in spec.guest.ports of VM day2/web (declared: 53/UDP (dns), 80/TCP (http))"}},
		{"port-forward to a UDP port", []string{"port-forward", "web", "53"}, []string{"guest port 53/TCP is not declared"}},
		{"ssh to a VM without port 22", []string{"ssh", "web"}, []string{"guest port 22/TCP is not declared"}},
		{"ssh to a VM without a pod", []string{"ssh", "stopped", "--port", "80"}, []string{"VM day2/stopped is Succeeded: it has no runner pod"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.args[0] == "ssh" && !haveSSH() {
				t.Skip("no ssh client in PATH")
			}
			_, stderr, code := vmctlWithin(t, limit, append([]string{"--kubeconfig", kc, "-n", ns}, tc.args...)...)
			oneErrorLine(t, tc.name, stderr, code, tc.want...)
			t.Logf("vmctl %s: %s", strings.Join(tc.args, " "), strings.TrimSpace(stderr))
		})
	}

	// A user who may read VMs and pods but not exec, port-forward or read logs: the API server's
	// Forbidden, on one line.
	viewer := viewerKubeconfig(t, kc, ns)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"console without pods/exec", []string{"console", "web"}, []string{"console of VM day2/web", "forbidden", `"pods/exec"`}},
		{"port-forward without pods/portforward", []string{"port-forward", "web", "0:80"}, []string{"port-forward of VM day2/web", "forbidden", `"pods/portforward"`}},
		{"logs without pods/log", []string{"logs", "web"}, []string{"logs of VM day2/web", "forbidden", `"pods/log"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := vmctlWithin(t, limit, append([]string{"--kubeconfig", viewer, "-n", ns}, tc.args...)...)
			oneErrorLine(t, tc.name, stderr, code, tc.want...)
			t.Logf("vmctl %s: %s", strings.Join(tc.args, " "), strings.TrimSpace(stderr))
		})
	}
}

func createVMWithStatus(t *testing.T, vm *vmv1.VirtualMachine, st vmv1.VirtualMachineStatus) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	vm.Status = st
	if err := env.Client.Status().Update(ctx, vm); err != nil {
		t.Fatal(err)
	}
}

func createPod(t *testing.T, ns, name string, st *corev1.PodStatus) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: vmv1.RunnerContainer, Image: "runner"}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if st != nil {
		pod.Status = *st
		if err := env.Client.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
}

// viewerKubeconfig is the admin's kubeconfig impersonating a ServiceAccount that may only get
// and list VMs and pods in ns.
func viewerKubeconfig(t *testing.T, adminKubeconfig, ns string) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "viewer"}}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm-viewer"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{vmv1.GroupVersion.Group}, Resources: []string{"virtualmachines"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm-viewer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "vm-viewer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "viewer"}},
	}
	if err := env.Client.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	// The RBAC authorizer learns of new roles through its own watch: until it has, the viewer
	// is refused even the reads it was granted (one CI run failed so, "role ... not found").
	user := "system:serviceaccount:" + ns + ":viewer"
	kubeapi.Eventually(t, "the viewer's role in force", 30*time.Second, func() error {
		for _, ra := range []authorizationv1.ResourceAttributes{
			{Namespace: ns, Verb: "get", Group: vmv1.GroupVersion.Group, Resource: "virtualmachines"},
			{Namespace: ns, Verb: "get", Resource: "pods"},
		} {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &ra}}
			if err := env.Client.Create(ctx, review); err != nil {
				return err
			}
			if !review.Status.Allowed {
				return fmt.Errorf("%s may not %s %s yet: %s", user, ra.Verb, ra.Resource, review.Status.Reason)
			}
		}
		return nil
	})
	cfg, err := clientcmd.LoadFromFile(adminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "viewer.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func haveSSH() bool {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(dir, "ssh")); err == nil {
			return true
		}
	}
	return false
}
