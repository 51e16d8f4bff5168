package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/manager"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// TestTrustFencesAsInstalled: the admission policies as the release installs them, met with the
// tokens of those they fence. A namespace admin (the admin ClusterRole bound in a VM namespace,
// its ServiceAccount's token) may run VMs there, but cannot make a pod that poses as a runner
// (virtpod's devices, its managed-by label), cannot put virtpod's annotations on a pod, and
// cannot create a VM carrying virtpod's labels. The node agent's own pod-bound token may label
// its node under virtpod.io/, but cannot taint it, put another label on it, or create a Secret
// other than its TLS one. Each refusal must be the policy's (its name and words), not RBAC's.
// Every check is a write the API server refuses or a dry run: no pod runs, no guest boots.
func TestTrustFencesAsInstalled(t *testing.T) {
	parallelSafe(t)
	ctx := context.Background()
	ns := namespace(t)
	admin := namespaceAdmin(t, ctx, ns)

	// What the admin may do: a VM (dry run), an ordinary pod.
	if err := admin.Create(ctx, newVM(ns, "allowed"), client.DryRunAll); err != nil {
		t.Fatalf("a namespace admin cannot create a VirtualMachine: %v", err)
	}
	plain := toolboxPod(ns, "plain")
	if err := admin.Create(ctx, plain, client.DryRunAll); err != nil {
		t.Fatalf("a namespace admin cannot create an ordinary pod: %v", err)
	}

	device := func(name corev1.ResourceName) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			r := corev1.ResourceList{name: resource.MustParse("1")}
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: r, Limits: r}
		}
	}
	for _, c := range []struct {
		what, want string
		edit       func(*corev1.Pod)
	}{
		{"a pod requesting the control device", "only the virtpod controller may create pods that request devices.virtpod.io/control", device(vmv1.ResourceControl)},
		{"a pod requesting KVM", "devices.virtpod.io/kvm", device(vmv1.ResourceKVM)},
		{"a pod labelled managed-by virtpod", "metadata.labels: app.kubernetes.io/managed-by are reserved",
			func(p *corev1.Pod) { p.Labels = map[string]string{"app.kubernetes.io/managed-by": "virtpod"} }},
		{"a pod with virtpod's annotations", "metadata.annotations: vm.virtpod.io/migrate-to are reserved",
			func(p *corev1.Pod) { p.Annotations = map[string]string{vmv1.AnnotationMigrateTo: "10.0.0.1:9440"} }},
	} {
		p := toolboxPod(ns, "posing")
		c.edit(p)
		refusedBy(t, c.what, "virtpod-runner-pods", c.want, admin.Create(ctx, p, client.DryRunAll))
	}
	// Annotations added to a pod that exists: the admin's own ordinary pod.
	if err := admin.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	refusedBy(t, "virtpod's annotation added to a pod", "virtpod-runner-pods", "metadata.annotations: the keys under vm.virtpod.io/",
		admin.Patch(ctx, plain, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"vm.virtpod.io/desired-cpus":"64"}}}`)), client.DryRunAll))

	for label, value := range map[string]string{podspec.LabelVMName: "other", vmv1.LabelMigrationRole: vmv1.MigrationRoleTarget} {
		vm := newVM(ns, "reserved")
		vm.Labels[label] = value
		refusedBy(t, "a VM labelled "+label, "virtpod-vm-labels", "metadata.labels: "+label+" are reserved", admin.Create(ctx, vm, client.DryRunAll))
	}

	// The node agent, with a token bound to its own pod as the kubelet gives it.
	agentPod := runningPod(t, ctx, "virtpod-agent")
	agent := agentToken(t, ctx, agentPod)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: agentPod.Spec.NodeName}}
	nodePatch := func(body string) error {
		return agent.Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(body)), client.DryRunAll)
	}
	if err := nodePatch(`{"metadata":{"labels":{"virtpod.io/trust-check":"true"}}}`); err != nil {
		t.Errorf("the agent cannot label its own node under virtpod.io/: %v", err)
	}
	refusedBy(t, "the agent tainting its node", "virtpod-agent-nodes", "not its spec (taints included)",
		nodePatch(`{"spec":{"taints":[{"key":"evil","effect":"NoExecute"}]}}`))
	refusedBy(t, "the agent labelling its node outside virtpod.io/", "virtpod-agent-nodes", "only its Node's virtpod.io/ and provider.virtpod.io/ labels",
		nodePatch(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`))
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "virtpod-system", Name: "virtpod-migration-tls",
		Annotations: map[string]string{corev1.ServiceAccountNameKey: "virtpod-controller"}}, Type: corev1.SecretTypeServiceAccountToken}
	refusedBy(t, "the agent creating a token Secret", "virtpod-agent-secrets", "only as type kubernetes.io/tls or Opaque", agent.Create(ctx, token, client.DryRunAll))
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "virtpod-system", Name: "other"}, Type: corev1.SecretTypeOpaque}
	refusedBy(t, "the agent creating another Secret", "virtpod-agent-secrets", "only Secret virtpod-system/virtpod-migration-tls", agent.Create(ctx, other, client.DryRunAll))
}

// refusedBy wants err to be policy's refusal, with want in its words.
func refusedBy(t *testing.T, what, policy, want string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s was admitted; want ValidatingAdmissionPolicy %s's refusal", what, policy)
	case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'") || !strings.Contains(err.Error(), want):
		t.Errorf("%s: %v; want ValidatingAdmissionPolicy %s's refusal saying %q", what, err, policy, want)
	}
}

func toolboxPod(ns, name string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "localhost/virtpod/toolbox:dev", Command: []string{"sleep", "3600"}}}}}
	restrict(p) // the namespace enforces Pod Security restricted, as for every VM namespace
	return p
}

// namespaceAdmin is a client with the token of a ServiceAccount that holds the admin ClusterRole
// in ns only: a namespace admin, not a cluster admin.
func namespaceAdmin(t *testing.T, ctx context.Context, ns string) client.Client {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ns-admin"}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ns-admin"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}}}
	for _, o := range []client.Object{sa, binding} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	req, err := kubeset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](900)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := tokenClient(t, req.Status.Token)
	// The RoleBinding reaches the RBAC authorizer's cache a moment after it is created.
	eventually(t, "the namespace admin's binding in force", time.Minute, func() error {
		return c.List(ctx, &vmv1.VirtualMachineList{}, client.InNamespace(ns))
	})
	return c
}

// agentToken is a client with a token of the agent's ServiceAccount bound to pod, as the kubelet
// mounts into it (with its node's name, which the policies compare).
func agentToken(t *testing.T, ctx context.Context, pod corev1.Pod) client.Client {
	t.Helper()
	req, err := kubeset.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](900),
			BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tokenClient(t, req.Status.Token)
}

func tokenClient(t *testing.T, token string) client.Client {
	t.Helper()
	cfg := rest.AnonymousClientConfig(restConfig)
	cfg.BearerToken = token
	c, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(fmt.Errorf("a client with a token: %w", err))
	}
	return c
}
