package resize

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// installYAML creates every object of a config/ file.
func installYAML(t *testing.T, objs ...client.Object) func(path string) {
	return func(path string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(kubeapi.Root(), path))
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for _, obj := range objs {
			if err := dec.Decode(obj); err != nil && !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			if err := env.Client.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("create %s: %v", obj.GetName(), err)
			}
		}
	}
}

// TestAgentPolicy: the agent's own token carries its node, and with config/agent's roles and
// config/admission's policy it may report on the pods of its node, take part in their
// migrations (receiver on targets, state on sources), keep the agents' one Secret, and do
// nothing else.
func TestAgentPolicy(t *testing.T) {
	ctx := context.Background()
	agent, who := env.AgentClient(t, "node-p")
	if got := who.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != "node-p" {
		t.Fatalf("the agent's pod-bound token carries node %v (user %+v); the policy needs it", got, who)
	}
	installYAML(t, &rbacv1.ClusterRole{}, &rbacv1.Role{})("config/agent/role.yaml")
	installYAML(t, &rbacv1.ClusterRoleBinding{}, &rbacv1.RoleBinding{})("config/agent/role_binding.yaml")
	installYAML(t, &admissionv1.ValidatingAdmissionPolicy{}, &admissionv1.ValidatingAdmissionPolicyBinding{})("config/admission/agent-pods-policy.yaml")

	ns := namespace(t)
	mine := runnerPodOn(t, ns, "mine-runner", "node-p")
	theirs := runnerPodOn(t, ns, "theirs-runner", "node-q")
	patch := func(pod *corev1.Pod, body map[string]any) error {
		b, _ := json.Marshal(body)
		// Strategic: a container's image is changed in place, as kubectl set image does.
		_, err := agent.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, b, metav1.PatchOptions{})
		return err
	}
	annotations := func(kv ...any) map[string]any {
		a := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			a[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"metadata": map[string]any{"annotations": a}}
	}
	// The policy comes into force asynchronously: wait until it refuses.
	kubeapi.Eventually(t, "the agent policy in force", 30*time.Second, func() error {
		if err := patch(theirs, annotations(vmv1.AnnotationGuestCPUs, "2")); err == nil {
			return errors.New("a pod on another node was patched")
		} else if !strings.Contains(err.Error(), "only pods on its own node (node-p), not pods on node-q") {
			return fmt.Errorf("refused, but not by the policy: %v", err)
		}
		return nil
	})
	if err := patch(mine, annotations(vmv1.AnnotationGuestCPUs, "2", vmv1.AnnotationGuestMemory, "512Mi", vmv1.AnnotationResizeError, "x")); err != nil {
		t.Fatalf("the agent could not report on its own node's pod: %v", err)
	}
	if err := patch(mine, annotations(vmv1.AnnotationResizeError, nil)); err != nil {
		t.Fatalf("the agent could not clear its error: %v", err)
	}
	if err := patch(mine, annotations(vmv1.AnnotationGuestFacts, `{"channel":true,"connected":true}`)); err != nil {
		t.Fatalf("the agent could not write the guest agent's facts on its own node's pod: %v", err)
	}
	if err := patch(theirs, annotations(vmv1.AnnotationGuestFacts, `{"channel":true}`)); err == nil || !strings.Contains(err.Error(), "only pods on its own node") {
		t.Errorf("the agent wrote guest facts on another node's pod: %v", err)
	}
	if err := patch(mine, annotations(vmv1.AnnotationGuestStarted, "2026-12-05T05:30:00.123Z", vmv1.AnnotationGuestMachine, "pc-q35-10.0")); err != nil {
		t.Fatalf("the agent could not report its own node's guest's start and machine: %v", err)
	}
	if err := patch(theirs, annotations(vmv1.AnnotationGuestStarted, "2026-12-05T05:30:00.123Z")); err == nil || !strings.Contains(err.Error(), "only pods on its own node") {
		t.Errorf("the agent reported a start on another node's pod: %v", err)
	}
	if err := patch(mine, annotations(vmv1.AnnotationSuspendError, "--suspend-to: no space left on device")); err != nil {
		t.Fatalf("the agent could not report a suspend's failure on its own node's pod: %v", err)
	}
	for what, body := range map[string]map[string]any{
		"the suspend request": annotations(vmv1.AnnotationSuspend, "true"),
		"the desired size":    annotations(vmv1.AnnotationDesiredCPUs, "4"),
		"another annotation":  annotations("x", "y"),
		"a label":             {"metadata": map[string]any{"labels": map[string]any{"app": "evil"}}},
		"the image":           {"spec": map[string]any{"containers": []any{map[string]any{"name": "runner", "image": "evil"}}}},
	} {
		if err := patch(mine, body); err == nil || !strings.Contains(err.Error(), "may change only the annotations") {
			t.Errorf("the agent changed %s: %v", what, err)
		}
	}

	// Live migration: the receiver on its node's targets, the state on its node's other pods.
	target := runnerPodOn(t, ns, "mine-m1", "node-p")
	farTarget := runnerPodOn(t, ns, "theirs-m1", "node-q")
	for _, p := range []*corev1.Pod{target, farTarget} {
		if err := env.Client.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+vmv1.LabelMigrationRole+`":"target"}}}`))); err != nil {
			t.Fatal(err)
		}
	}
	if err := patch(target, annotations(vmv1.AnnotationMigrationReceiver, "10.1.0.7:9440")); err != nil {
		t.Errorf("the agent could not write the receiver of its node's target: %v", err)
	}
	if err := patch(mine, annotations(vmv1.AnnotationMigrationState, `{"role":"source","state":"active"}`)); err != nil {
		t.Errorf("the agent could not write the migration state of its node's source: %v", err)
	}
	if err := patch(mine, annotations(vmv1.AnnotationHotplugResult, `{"for":"d1","status":{"disks":[]}}`)); err != nil {
		t.Errorf("the agent could not write a hotplug result on its node's pod: %v", err)
	}
	for what, c := range map[string]struct {
		pod  *corev1.Pod
		body map[string]any
		want string
	}{
		"the receiver of a source":         {mine, annotations(vmv1.AnnotationMigrationReceiver, "10.1.0.7:9440"), "migration-state, snapshot-result and hotplug-result (on a pod that is not a migration target)"},
		"the state of a target":            {target, annotations(vmv1.AnnotationMigrationState, `{"state":"completed"}`), "migration-receiver (on a migration target)"},
		"migrate-to":                       {mine, annotations(vmv1.AnnotationMigrateTo, "10.1.0.7:9440/x"), "may change only the annotations"},
		"the migration":                    {target, annotations(vmv1.AnnotationMigration, "other"), "may change only the annotations"},
		"resume":                           {mine, annotations(vmv1.AnnotationMigrationResume, "true"), "may change only the annotations"},
		"the role label":                   {target, map[string]any{"metadata": map[string]any{"labels": map[string]any{vmv1.LabelMigrationRole: nil}}}, "not their spec, labels"},
		"the receiver on another node":     {farTarget, annotations(vmv1.AnnotationMigrationReceiver, "10.1.0.7:9440"), "only pods on its own node"},
		"the hotplug request":              {mine, annotations(vmv1.AnnotationHotplug, "d2"), "may change only the annotations"},
		"the hotplug result of a target":   {target, annotations(vmv1.AnnotationHotplugResult, `{"for":"d1"}`), "migration-receiver (on a migration target)"},
		"a hotplug result on another node": {theirs, annotations(vmv1.AnnotationHotplugResult, `{"for":"d1"}`), "only pods on its own node"},
	} {
		if err := patch(c.pod, c.body); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("the agent changed %s: %v", what, err)
		}
	}

	// Its Secret, and no other.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "virtpod-migration-tls"}, StringData: map[string]string{"ca.crt": "x"}}
	if _, err := agent.CoreV1().Secrets("virtpod-system").Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Errorf("the agent could not create its Secret: %v", err)
	}
	if _, err := agent.CoreV1().Secrets("virtpod-system").Get(ctx, "virtpod-migration-tls", metav1.GetOptions{}); err != nil {
		t.Errorf("the agent could not read its Secret: %v", err)
	}
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "virtpod-system", Name: "someone-else"}}
	if err := env.Client.Create(ctx, other); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, getOther := agent.CoreV1().Secrets("virtpod-system").Get(ctx, "someone-else", metav1.GetOptions{})
	_, list := agent.CoreV1().Secrets("virtpod-system").List(ctx, metav1.ListOptions{})
	_, elsewhere := agent.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
	_, getElsewhere := agent.CoreV1().Secrets(ns).Get(ctx, "virtpod-migration-tls", metav1.GetOptions{})
	for verb, err := range map[string]error{
		"get another Secret":              getOther,
		"list Secrets":                    list,
		"create a Secret elsewhere":       elsewhere,
		"get its Secret's name elsewhere": getElsewhere,
		"delete":                          agent.CoreV1().Pods(ns).Delete(ctx, mine.Name, metav1.DeleteOptions{}),
		"exec":                            agent.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(mine.Name).SubResource("exec").Do(ctx).Error(),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("the agent's %s was not forbidden: %v", verb, err)
		}
	}
}
