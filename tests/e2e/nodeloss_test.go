package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// loseNode stops node2 for real — its kubelet, containerd and every process of its pods,
// guests included — and keeps its Node object, as a machine that died does (`localcluster
// node-down --keep-node-object`). The node goes NotReady; both VMs on it say so and start
// nothing, since the guest may still run where nobody hears from it. Once an admin taints the
// node out-of-service (Kubernetes' non-graceful node shutdown), its pods are removed: "far"
// starts again on node1 (runStrategy Always, a counted restart), "rooted", whose root disk is on
// a claim made on node2, waits and says why. No guest of "rooted" ever runs a second time.
func loseNode(t *testing.T, ns, node1, node2 string) {
	t.Helper()
	ctx := context.Background()
	oldRooted := getVM(t, ns, "rooted").Status.PodUID
	if out, err := localcluster("node-down", "--keep-node-object"); err != nil {
		t.Fatalf("node-down --keep-node-object: %v\n%s", err, out)
	}
	lost := time.Now()
	for _, name := range []string{"far", "rooted"} {
		eventually(t, name+" Ready=False/NodeNotReady", 2*time.Minute, func() error {
			c := meta.FindStatusCondition(getVM(t, ns, name).Status.Conditions, vmv1.ConditionReady)
			if c == nil || c.Reason != vmv1.ReasonNodeNotReady || !strings.Contains(c.Message, "node.kubernetes.io/out-of-service") {
				return fmt.Errorf("Ready %+v", c)
			}
			return nil
		})
	}
	t.Logf("node %s NotReady in the VMs' status %v after it died", node2, time.Since(lost).Round(100*time.Millisecond))
	if vm := getVM(t, ns, "far"); vm.Status.PodUID == "" || vm.Status.Node != node2 {
		t.Fatalf("far left its lost node before anyone said the node is gone: %+v", vm.Status)
	}

	if out, err := run("taint", "node", node2, "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"); err != nil {
		t.Fatalf("taint: %v\n%s", err, out)
	}
	tainted := time.Now()
	far := waitRunning(t, ns, "far", 1)
	if far.Status.Node != node1 {
		t.Errorf("far restarted on %s, want %s", far.Status.Node, node1)
	}
	t.Logf("far Running on %s %v after the taint", node1, time.Since(tainted).Round(100*time.Millisecond))

	eventually(t, "rooted waiting for its claim's node", 2*time.Minute, func() error {
		vm := getVM(t, ns, "rooted")
		c := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionScheduled)
		if vm.Status.PodUID == oldRooted || c == nil || c.Reason != vmv1.ReasonUnschedulable ||
			!strings.Contains(c.Message, "claim rooted-root's volume is on node "+node2+", which is not ready") {
			return fmt.Errorf("pod %s (was %s), Scheduled %+v", vm.Status.PodUID, oldRooted, c)
		}
		return nil
	})
	pods := &corev1.PodList{}
	if err := kube.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{"app": "rooted"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
			t.Errorf("rooted's pod %s on %q in phase %s: only one pending pod may exist while its claim's node is lost", p.Name, p.Spec.NodeName, p.Status.Phase)
		}
	}
	if len(pods.Items) != 1 {
		t.Errorf("rooted has %d pods, want the one waiting", len(pods.Items))
	}

	// Nothing is left for the provisioner to tear down on the dead node, where its helper pod
	// would wait for ever: the volume is kept (its folder goes with the cluster) and deleted.
	pvc := &corev1.PersistentVolumeClaim{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rooted-root"}, pvc); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{}
	pv.Name = pvc.Spec.VolumeName
	if err := kube.Patch(ctx, pv, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}`))); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{getVM(t, ns, "rooted"), pvc, pv} {
		if err := kube.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}
