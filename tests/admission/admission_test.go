// Package admission reproduces, against a real API server with config/admission's policies as
// shipped, what a namespace user or a node agent could otherwise do past the boundary
// docs/security.md draws: make a pod the node side takes for a runner, retag a real runner
// pod, label a VM into a migration target, or, from an agent's token, touch another node,
// taint its own, or mint a token Secret.
package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(withPolicies{m}, &env) }

type withPolicies struct{ m *testing.M }

func (w withPolicies) Run() int {
	ctx := context.Background()
	qemu := kubeapi.DefaultProviderClass()
	if err := env.Client.Create(ctx, qemu); err != nil {
		fmt.Println(err)
		return 1
	}
	if _, err := env.InstallAdmission(ctx); err != nil {
		fmt.Println(err)
		return 1
	}
	return w.m.Run()
}

const controllerSA = "system:serviceaccount:virtpod-system:virtpod-controller"

func namespace(t *testing.T) string {
	t.Helper()
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "virtpod-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "adm-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func pod(ns, name string, mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "runner", Image: "busybox"}}}}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func runnerShaped(p *corev1.Pod) {
	p.Labels = map[string]string{"app.kubernetes.io/managed-by": "virtpod", "vm.virtpod.io/name": "victim"}
	p.Annotations = map[string]string{vmv1.AnnotationDesiredCPUs: "2"}
	dev := corev1.ResourceList{vmv1.ResourceControl: resource.MustParse("1")}
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: dev, Limits: dev}
}

// forbidden fails unless err is the API server's Forbidden carrying every part.
func forbidden(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted", what)
		return
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
		t.Errorf("%s: refused, but not by a policy: %v", what, err)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: the refusal does not say %q: %v", what, p, err)
		}
	}
}

// inForce waits for a policy just created to refuse what it should; the API server loads
// policies asynchronously.
func inForce(t *testing.T, what string, try func() error) {
	t.Helper()
	kubeapi.Eventually(t, what, 30*time.Second, func() error {
		if err := try(); err == nil {
			return errors.New("still accepted")
		} else if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			return err
		}
		return nil
	})
}

// TestOnlyTheControllerMakesRunnerPods: a namespace admin cannot create a pod that requests
// virtpod's devices or carries its reserved labels or annotations, nor change those on a real
// runner pod; the controller's service account can; other pods and other labels are untouched.
func TestOnlyTheControllerMakesRunnerPods(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	alice := env.As(t, "alice", nil, "cluster-admin", ns)
	controller := env.As(t, controllerSA, []string{"system:serviceaccounts", "system:serviceaccounts:virtpod-system"}, "cluster-admin", "")

	inForce(t, "the runner-pods policy", func() error { return alice.Create(ctx, pod(ns, "probe", runnerShaped)) })
	forbidden(t, "a pod requesting the control device", alice.Create(ctx, pod(ns, "dev", func(p *corev1.Pod) {
		dev := corev1.ResourceList{vmv1.ResourceControl: resource.MustParse("1")}
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: dev, Limits: dev}
	})), "only the virtpod controller may create pods that request devices.virtpod.io/control")
	forbidden(t, "an init container requesting kvm", alice.Create(ctx, pod(ns, "initdev", func(p *corev1.Pod) {
		dev := corev1.ResourceList{"devices.virtpod.io/kvm": resource.MustParse("1")}
		p.Spec.InitContainers = []corev1.Container{{Name: "i", Image: "busybox", Resources: corev1.ResourceRequirements{Requests: dev, Limits: dev}}}
	})), "devices.virtpod.io/kvm")
	forbidden(t, "a pod labelled managed-by virtpod", alice.Create(ctx, pod(ns, "label", func(p *corev1.Pod) {
		p.Labels = map[string]string{"app.kubernetes.io/managed-by": "virtpod"}
	})), "metadata.labels: app.kubernetes.io/managed-by are reserved")
	forbidden(t, "a pod labelled a migration target", alice.Create(ctx, pod(ns, "role", func(p *corev1.Pod) {
		p.Labels = map[string]string{vmv1.LabelMigrationRole: vmv1.MigrationRoleTarget}
	})), "vm.virtpod.io/migration-role")
	forbidden(t, "a pod with a migrate-to annotation", alice.Create(ctx, pod(ns, "ann", func(p *corev1.Pod) {
		p.Annotations = map[string]string{vmv1.AnnotationMigrateTo: "10.0.0.1:9440"}
	})), "metadata.annotations: vm.virtpod.io/migrate-to are reserved")
	if err := alice.Create(ctx, pod(ns, "plain", func(p *corev1.Pod) {
		p.Labels = map[string]string{"app.kubernetes.io/managed-by": "helm", "app": "web"}
	})); err != nil {
		t.Errorf("an ordinary pod was refused: %v", err)
	}

	// The agent DaemonSet's pods request devices.virtpod.io/kvm-probe, in the admin's namespace.
	sys := env.As(t, "daemonset-controller-stand-in", nil, "cluster-admin", "virtpod-system")
	if err := sys.Create(ctx, pod("virtpod-system", "agent-shaped", func(p *corev1.Pod) {
		dev := corev1.ResourceList{vmv1.ResourceKVMProbe: resource.MustParse("1")}
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: dev, Limits: dev}
	})); err != nil {
		t.Errorf("an agent-shaped pod in virtpod-system was refused: %v", err)
	}

	// The controller's pod, and what a namespace user may and may not do to it.
	runner := pod(ns, "vm-runner", runnerShaped)
	if err := controller.Create(ctx, runner); err != nil {
		t.Fatalf("the controller could not create a runner pod: %v", err)
	}
	patch := func(body string) error {
		return alice.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: runner.Name}}, client.RawPatch(types.MergePatchType, []byte(body)))
	}
	forbidden(t, "a user raising the desired size", patch(`{"metadata":{"annotations":{"vm.virtpod.io/desired-cpus":"64"}}}`), "metadata.annotations: the keys under vm.virtpod.io/")
	forbidden(t, "a user adding migrate-to", patch(`{"metadata":{"annotations":{"vm.virtpod.io/migrate-to":"10.0.0.1:1"}}}`), "vm.virtpod.io/")
	forbidden(t, "a user removing the desired size", patch(`{"metadata":{"annotations":{"vm.virtpod.io/desired-cpus":null}}}`), "vm.virtpod.io/")
	forbidden(t, "a user relabelling the pod a target", patch(`{"metadata":{"labels":{"vm.virtpod.io/migration-role":"target"}}}`), "metadata.labels: the keys under vm.virtpod.io/")
	forbidden(t, "a user removing managed-by", patch(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":null}}}`), "metadata.labels")
	if err := patch(`{"metadata":{"labels":{"team":"a"},"annotations":{"note":"mine"}}}`); err != nil {
		t.Errorf("a user could not add an ordinary label and annotation to a runner pod: %v", err)
	}
	if err := controller.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: runner.Name}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"vm.virtpod.io/desired-cpus":"3"}}}`))); err != nil {
		t.Errorf("the controller could not change its desired size: %v", err)
	}
}

// TestVMsCannotCarryReservedLabels: a VM's labels reach its pod, so virtpod's keys are refused
// on VMs with a message naming them; others pass.
func TestVMsCannotCarryReservedLabels(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	alice := env.As(t, "alice", nil, "cluster-admin", ns)
	vm := kubeapi.SampleVM(ns, "target")
	vm.Labels = map[string]string{vmv1.LabelMigrationRole: vmv1.MigrationRoleTarget, "app": "web"}
	inForce(t, "the VM labels policy", func() error { return alice.Create(ctx, vm.DeepCopy()) })
	forbidden(t, "a VM labelled a migration target", alice.Create(ctx, vm.DeepCopy()),
		"metadata.labels: vm.virtpod.io/migration-role are reserved", "remove them from the VirtualMachine")
	vm.Labels = map[string]string{"app": "web"}
	if err := alice.Create(ctx, vm); err != nil {
		t.Fatalf("a VM with ordinary labels was refused: %v", err)
	}
	err := alice.Patch(ctx, vm, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"virtpod"}}}`)))
	forbidden(t, "a VM relabelled managed-by virtpod", err, "app.kubernetes.io/managed-by")
}

// TestVMStoredWithReservedLabels: a VM that got a reserved label before the policy was in force
// (an upgrade from a release that lacked it) still takes every other update — a label of its
// own, its finalizer's removal as the controller deletes it — but cannot change the reserved
// label or gain another.
func TestVMStoredWithReservedLabels(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "virtpod-vm-labels"}, binding); err != nil {
		t.Fatal(err)
	}
	actions := func(a ...admissionv1.ValidationAction) {
		t.Helper()
		patched := binding.DeepCopy()
		patched.Spec.ValidationActions = a
		if err := env.Client.Patch(ctx, patched, client.MergeFrom(binding)); err != nil {
			t.Fatal(err)
		}
		binding = patched
	}
	// Before the policy: its binding only warns (the rest of this package runs one test at a time).
	actions(admissionv1.Warn)
	t.Cleanup(func() { actions(admissionv1.Deny) })
	vm := kubeapi.SampleVM(ns, "old")
	vm.Labels = map[string]string{vmv1.LabelMigrationRole: vmv1.MigrationRoleTarget}
	vm.Finalizers = []string{"test.virtpod.io/hold"}
	kubeapi.Eventually(t, "the VM labels policy only warning", 30*time.Second, func() error { return env.Client.Create(ctx, vm.DeepCopy()) })
	actions(admissionv1.Deny)
	inForce(t, "the VM labels policy denying again", func() error {
		return env.Client.Create(ctx, func() *vmv1.VirtualMachine { v := vm.DeepCopy(); v.Name = "new"; return v }())
	})

	patch := func(body string) error {
		return env.Client.Patch(ctx, &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "old"}}, client.RawPatch(types.MergePatchType, []byte(body)))
	}
	if err := patch(`{"metadata":{"labels":{"app":"web"}}}`); err != nil {
		t.Errorf("a label of its own on a VM stored with a reserved one: %v", err)
	}
	forbidden(t, "the reserved label changed", patch(`{"metadata":{"labels":{"vm.virtpod.io/migration-role":"source"}}}`), "vm.virtpod.io/migration-role are reserved")
	forbidden(t, "another reserved label", patch(`{"metadata":{"labels":{"vm.virtpod.io/name":"other"}}}`), "vm.virtpod.io/name are reserved")
	if err := env.Client.Delete(ctx, &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "old"}}); err != nil {
		t.Fatal(err)
	}
	if err := patch(`{"metadata":{"finalizers":null}}`); err != nil {
		t.Errorf("the finalizer's removal from a VM stored with a reserved label: %v", err)
	}
}

// TestAgentWritesBounded: an agent's token changes its own Node's virtpod labels and its own
// HypervisorNode, creates the migration Secret as a TLS Secret, and nothing else: not another
// node, not a taint or another label of its own, not another HypervisorNode, not a token Secret.
func TestAgentWritesBounded(t *testing.T) {
	ctx := context.Background()
	agent, who := env.AgentClient(t, "node-a")
	if got := who.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != "node-a" {
		t.Fatalf("the agent's token carries node %v; the policies need it", got)
	}
	for _, n := range []string{"node-b"} {
		if err := env.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	installAgentRBAC(t)
	nodePatch := func(node, body string) error {
		_, err := agent.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	inForce(t, "the agent-nodes policy", func() error { return nodePatch("node-b", `{"metadata":{"labels":{"virtpod.io/kvm":"true"}}}`) })
	if err := nodePatch("node-a", `{"metadata":{"labels":{"virtpod.io/kvm":"true","provider.virtpod.io/qemu":"true"}}}`); err != nil {
		t.Errorf("the agent could not label its own node: %v", err)
	}
	forbidden(t, "another node's label", nodePatch("node-b", `{"metadata":{"labels":{"virtpod.io/kvm":"false"}}}`), "only its own Node (node-a), not node-b")
	forbidden(t, "another label of its own node", nodePatch("node-a", `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`), "only its Node's virtpod.io/ and provider.virtpod.io/ labels")
	forbidden(t, "a taint on its own node", nodePatch("node-a", `{"spec":{"taints":[{"key":"evil","effect":"NoExecute"}]}}`), "not its spec (taints included)")
	forbidden(t, "unschedulable", nodePatch("node-a", `{"spec":{"unschedulable":true}}`), "not its spec")

	hn := func(name string) *vmv1.HypervisorNode {
		return &vmv1.HypervisorNode{TypeMeta: metav1.TypeMeta{APIVersion: vmv1.GroupVersion.String(), Kind: "HypervisorNode"}, ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	createHN := func(name string) error {
		return agent.CoreV1().RESTClient().Post().AbsPath("/apis/vm.virtpod.io/v1alpha1/hypervisornodes").Body(mustJSON(t, hn(name))).Do(ctx).Error()
	}
	forbidden(t, "another node's HypervisorNode", createHN("node-b"), "only its own HypervisorNode (node-a), not node-b")
	if err := createHN("node-a"); err != nil {
		t.Errorf("the agent could not create its own HypervisorNode: %v", err)
	}

	secrets := agent.CoreV1().Secrets("virtpod-system")
	forbidden(t, "a service-account-token Secret", func() error {
		_, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "virtpod-migration-tls",
			Annotations: map[string]string{corev1.ServiceAccountNameKey: "virtpod-controller"}}, Type: corev1.SecretTypeServiceAccountToken}, metav1.CreateOptions{})
		return err
	}(), "only as type kubernetes.io/tls or Opaque")
	forbidden(t, "a Secret of another name", func() error {
		_, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": nil, "tls.key": nil}}, metav1.CreateOptions{})
		return err
	}(), "only Secret virtpod-system/virtpod-migration-tls")
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "virtpod-migration-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": []byte("x"), "tls.key": []byte("y")}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("the agent could not create the migration Secret: %v", err)
	}
}

// installAgentRBAC creates config/agent's roles and bindings as shipped.
func installAgentRBAC(t *testing.T) {
	t.Helper()
	for _, f := range []string{"config/agent/role.yaml", "config/agent/role_binding.yaml"} {
		objs, err := kubeapi.ReadObjects(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if err := env.Client.Create(context.Background(), o); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("%s: %v", f, err)
			}
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
