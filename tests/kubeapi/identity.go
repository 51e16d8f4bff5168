package kubeapi

import (
	"context"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/virtpod/virtpod/controllers/manager"
)

// AgentClient is the node agent's identity as the kubelet gives it to the agent's pod on node:
// the virtpod-agent service account's token bound to a pod on that node, so the token carries
// the node-name claim the admission policies read. It returns the client and the user the API
// server sees.
func (e *Env) AgentClient(t testing.TB, node string) (kubernetes.Interface, *authenticationv1.UserInfo) {
	t.Helper()
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "virtpod-system"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "virtpod-system", Name: "virtpod-agent"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
	} {
		if err := e.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	agentPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "virtpod-system", Name: "virtpod-agent-" + node},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "virtpod-agent", Containers: []corev1.Container{{Name: "agent", Image: "runner"}}}}
	if err := e.Client.Create(ctx, agentPod); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("virtpod-system").CreateToken(ctx, "virtpod-agent", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: agentPod.Name, UID: agentPod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(e.Config)
	cfg.BearerToken = tr.Status.Token
	agent, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := agent.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return agent, &review.Status.UserInfo
}

// As is a client that acts as user (in groups, plus system:authenticated) through
// impersonation, bound to ClusterRole role in namespace (cluster-wide when namespace is "").
// Of the API server's bootstrap roles only cluster-admin has its rules without
// kube-controller-manager (admin, edit and view are aggregated by it); bound in a namespace it
// is that namespace's admin.
func (e *Env) As(t testing.TB, user string, groups []string, role, namespace string) client.Client {
	t.Helper()
	ctx := context.Background()
	subject := rbacv1.Subject{Kind: rbacv1.UserKind, Name: user, APIGroup: rbacv1.GroupName}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}
	var binding client.Object = &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: "as-"}, Subjects: []rbacv1.Subject{subject}, RoleRef: ref}
	if namespace != "" {
		binding = &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: "as-", Namespace: namespace}, Subjects: []rbacv1.Subject{subject}, RoleRef: ref}
	}
	if err := e.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), binding) })
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append([]string{"system:authenticated"}, groups...)}
	c, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
