package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// TestCloudInitSeedFromSecret: a VM whose guest.cloudInit names a Secret shaped like a Cluster
// API bootstrap Secret (keys value and format) boots with a NoCloud seed disk; the guest reports
// the VM's UID as instance-id and the digest of the Secret's user-data, and the data appears
// nowhere in the VM or its pod. A VM whose Secret does not exist waits, says which Secret, and
// starts once the Secret is created.
func TestCloudInitSeedFromSecret(t *testing.T) {
	parallelSafe(t)
	ctx := context.Background()
	ns := namespace(t)
	userData := "#cloud-config\n# virtpod-e2e-bootstrap-" + ns + "\nruncmd:\n  - [sh, -c, 'echo joined']\n"
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "seeded-bootstrap"},
		Data:       map[string][]byte{"value": []byte(userData), "format": []byte("cloud-config")},
	}
	if err := kube.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	vm := newVM(ns, "seeded")
	vm.Spec.Guest.CloudInit = &vmv1.CloudInit{SecretRef: vmv1.SecretReference{Name: secret.Name}}
	if err := kube.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	missing := newVM(ns, "unseeded")
	missing.Spec.Guest.CloudInit = &vmv1.CloudInit{SecretRef: vmv1.SecretReference{Name: "no-such-secret"}}
	if err := kube.Create(ctx, missing); err != nil {
		t.Fatal(err)
	}

	vm = waitRunning(t, ns, "seeded", 0)
	pod := podspec.PodName("seeded")
	want := fmt.Sprintf("VIRTPOD-GUEST-SEED instance-id=%s hostname=seeded user-data-sha256=%x", vm.UID, sha256.Sum256([]byte(userData)))
	eventually(t, "the guest's seed line in the pod's logs", 2*time.Minute, func() error {
		return contains(podLogs(ns, pod), want)
	})

	// The data stays in the Secret: not in the VM, not in the pod's spec (arguments,
	// environment) or status, not in the runner's log.
	p, err := kubeset.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vmJSON, _ := json.Marshal(vm)
	podJSON, _ := json.Marshal(p)
	marker := "virtpod-e2e-bootstrap-" + ns
	for what, s := range map[string]string{"the VM": string(vmJSON), "the runner pod": string(podJSON), "the runner's log": podLogs(ns, pod)} {
		if strings.Contains(s, marker) || strings.Contains(s, base64.StdEncoding.EncodeToString([]byte(userData))) {
			t.Errorf("the Secret's user-data appears in %s", what)
		}
	}

	// The missing Secret: the pod cannot start and the VM names the Secret it waits for.
	eventually(t, "the VM waiting for its cloud-init Secret says which", 2*time.Minute, func() error {
		got := getVM(t, ns, "unseeded")
		c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionReady)
		if got.Status.Phase != vmv1.PhaseStarting || c == nil {
			return fmt.Errorf("status %+v", got.Status)
		}
		return contains(c.Message, `cloud-init Secret "no-such-secret"`)
	})
	eventually(t, "the kubelet's FailedMount event naming the Secret", 2*time.Minute, func() error {
		evs, err := kubeset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + podspec.PodName("unseeded") + ",reason=FailedMount"})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, `secret "no-such-secret" not found`) {
				t.Logf("event: %s", e.Message)
				return nil
			}
		}
		return fmt.Errorf("%d FailedMount events, none naming the Secret", len(evs.Items))
	})
	// Once the Secret exists, the kubelet's next try mounts it and the guest boots with it.
	late := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-such-secret"},
		Data:       map[string][]byte{"value": []byte("#cloud-config\n"), "format": []byte("cloud-config")},
	}
	if err := kube.Create(ctx, late); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, ns, "unseeded", 0)
}
