package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/migration"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

const secondNodeName = "virtpod-node-2"

// localcluster runs the local cluster's tool (tools/dev/localcluster) with the suite's
// environment, so it finds the cluster `make test` started.
func localcluster(args ...string) (string, error) {
	cmd := exec.Command("go", append([]string{"run", "./tools/dev/localcluster"}, args...)...)
	cmd.Dir = kubeapi.Root()
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// secondNode starts the local cluster's second node (its own containerd, kubelet and kube-proxy
// in namespaces of their own, docs/local-cluster.md) for a test that needs two, and returns its
// name. Cleanup stops it, checks it left nothing behind (node-down fails otherwise), deletes its
// Node object and waits until no pod is bound to it, so the tests after run on one node again.
func secondNode(t *testing.T) string {
	t.Helper()
	begin := time.Now()
	out, err := localcluster("node-up", "--name="+secondNodeName)
	if err != nil {
		t.Fatalf("node-up: %v\n%s", err, out)
	}
	t.Logf("node-up (go run included) in %.1fs:\n%s", time.Since(begin).Seconds(), out)
	t.Cleanup(func() {
		ctx := context.Background()
		if out, err := localcluster("node-down"); err != nil {
			t.Errorf("node-down: %v\n%s", err, out)
		}
		if err := kubeset.CoreV1().Nodes().Delete(ctx, secondNodeName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting Node %s: %v", secondNodeName, err)
		}
		eventually(t, "no pod bound to "+secondNodeName, 3*time.Minute, func() error {
			pods, err := kubeset.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + secondNodeName})
			if err != nil {
				return err
			}
			// Their kubelet is gone for good: delete them now rather than wait out the pod
			// garbage collector's quarantine for pods of a deleted node.
			for _, p := range pods.Items {
				_ = kubeset.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			}
			if n := len(pods.Items); n > 0 {
				return fmt.Errorf("%d pods, e.g. %s/%s", n, pods.Items[0].Namespace, pods.Items[0].Name)
			}
			return nil
		})
	})
	return secondNodeName
}

// onNode pins a pod to a node through the scheduler, as a user does.
func onNode(node string) map[string]string { return map[string]string{corev1.LabelHostname: node} }

// TestSecondNode: a second kubelet on this machine registers Ready; a pod pinned to it serves a
// pod on the first node by pod IP (without NAT: the server sees the client's pod IP) and through
// a Service; virtpod's DaemonSets run there; and a VM pinned to it runs and answers the first
// node.
func TestSecondNode(t *testing.T) {
	ctx := context.Background()
	node2 := secondNode(t)
	node1 := ""
	nodes, err := kubeset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Name != node2 {
			node1 = n.Name
		}
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		if !ready {
			t.Errorf("node %s not Ready: %+v", n.Name, n.Status.Conditions)
		}
	}
	if len(nodes.Items) != 2 || node1 == "" {
		t.Fatalf("want two nodes, have %d", len(nodes.Items))
	}

	ns := namespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "www"}, Data: map[string]string{"index.html": "served on node 2\n"}}
	srv := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "server", Labels: map[string]string{"app": "server"}},
		Spec: corev1.PodSpec{
			NodeSelector: onNode(node2),
			Containers: []corev1.Container{{Name: "httpd", Image: "localhost/virtpod/toolbox:dev",
				Command:        []string{"httpd", "-f", "-vv", "-p", "8080", "-h", "/www"},
				VolumeMounts:   []corev1.VolumeMount{{Name: "www", MountPath: "/www"}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1}}},
			Volumes: []corev1.Volume{{Name: "www", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "www"}}}}},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "server"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "server"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	for _, o := range []client.Object{cm, srv, svc} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	var serverIP string
	eventually(t, "server pod Ready on "+node2, 3*time.Minute, func() error {
		p := &corev1.Pod{}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(srv), p); err != nil {
			return err
		}
		if p.Spec.NodeName != node2 {
			return fmt.Errorf("on node %q", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				serverIP = p.Status.PodIP
				return nil
			}
		}
		return fmt.Errorf("phase %s, conditions %+v", p.Status.Phase, p.Status.Conditions)
	})
	if err := kube.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
		t.Fatal(err)
	}
	client1 := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "client"},
		Spec: corev1.PodSpec{NodeSelector: onNode(node1), Containers: []corev1.Container{{Name: "nc", Image: "localhost/virtpod/toolbox:dev",
			Command: []string{"sh", "-c", fmt.Sprintf("set -e\necho '--- %s 8080'\n%s\necho '--- %s 80'\n%s", serverIP, askGuest(serverIP, 8080, "/"), svc.Spec.ClusterIP, askGuest(svc.Spec.ClusterIP, 80, "/"))}}}},
	}
	got := runPod(t, client1)
	if strings.Count(got, "served on node 2") != 2 {
		t.Fatalf("a pod on %s did not reach the pod on %s by pod IP %s and Service %s:\n%s", node1, node2, serverIP, svc.Spec.ClusterIP, got)
	}
	p := &corev1.Pod{}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(client1), p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != node1 {
		t.Fatalf("client ran on %s, want %s", p.Spec.NodeName, node1)
	}
	// busybox httpd logs its peer as "IP:PORT" or, on an IPv6 socket, "[::ffff:IP]:PORT".
	if logs := "\n" + podLogs(ns, "server"); !strings.Contains(logs, "\n"+p.Status.PodIP+":") && !strings.Contains(logs, "[::ffff:"+p.Status.PodIP+"]:") {
		t.Errorf("the server on %s did not see the client's pod IP %s (NAT between the nodes?):\n%s", node2, p.Status.PodIP, logs)
	}

	// virtpod's node agent and device plugin run on the new node.
	for _, ds := range []string{"virtpod-agent", "virtpod-device-plugin"} {
		eventually(t, ds+" Running on "+node2, 3*time.Minute, func() error {
			pods := &corev1.PodList{}
			if err := kube.List(ctx, pods, client.InNamespace("virtpod-system"), client.MatchingLabels{"app.kubernetes.io/name": ds}); err != nil {
				return err
			}
			for _, p := range pods.Items {
				if p.Spec.NodeName == node2 && p.Status.Phase == corev1.PodRunning {
					return nil
				}
			}
			return fmt.Errorf("no Running %s pod on %s among %d", ds, node2, len(pods.Items))
		})
	}

	// Two VMs start on the new node, put there by cordoning the first (as an admin steering work
	// does) so that nothing in them pins them to it: "far" holds no claim, "rooted" has its root
	// disk on a node-local (local-path) claim, which is made on the node its pod lands on.
	cordon(t, node1, true)
	vm := newVM(ns, "far")
	// It asks for LiveMigrate, which its Pod network cannot do: checked at the end, where a
	// drain of its node must complete instead of waiting on it forever.
	vm.Spec.EvictionStrategy = vmv1.EvictionLiveMigrate
	rooted := newVM(ns, "rooted")
	rooted.Spec.Guest.RootDisk.Size = ptr.To(resource.MustParse("128Mi"))
	rooted.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "rooted-root"}
	for _, o := range []client.Object{newClaim(ns, "rooted-root", "128Mi", corev1.PersistentVolumeFilesystem), vm, rooted} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	vm = waitRunning(t, ns, "far", 0)
	if got := waitRunning(t, ns, "rooted", 0); vm.Status.Node != node2 || got.Status.Node != node2 {
		t.Fatalf("VMs run on %s and %s, want %s", vm.Status.Node, got.Status.Node, node2)
	}
	cordon(t, node1, false)
	eventually(t, "guest console marker", 2*time.Minute, func() error {
		return contains(podLogs(ns, vm.Status.PodName), marker)
	})
	guest := runPod(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "guest-client"},
		Spec: corev1.PodSpec{NodeSelector: onNode(node1), Containers: []corev1.Container{{Name: "http", Image: "localhost/virtpod/toolbox:dev",
			Command: []string{"sh", "-c", askGuest(vm.Status.PodIP, 80, "/")}}}},
	})
	if err := contains(guest, "virtpod guest far"); err != nil {
		t.Fatalf("the guest on %s did not answer a pod on %s: %v", node2, node1, err)
	}
	eventually(t, "Migratable=False/"+vmv1.ReasonNetworkNotMigratable, time.Minute, func() error {
		c := meta.FindStatusCondition(getVM(t, ns, "far").Status.Conditions, vmv1.ConditionMigratable)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != vmv1.ReasonNetworkNotMigratable {
			return fmt.Errorf("Migratable: %+v", c)
		}
		return nil
	})

	// The new node dies: "far" starts again on the first, "rooted" waits for its claim's node.
	loseNode(t, ns, node1, node2)

	// A VM owner cannot hold a drain: a guest that cannot move gets no disruption budget, so
	// `kubectl drain` of its node evicts it and completes (it restarts as its runStrategy says).
	vm = getVM(t, ns, "far")
	pdb := &policyv1.PodDisruptionBudget{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: migration.PDBName("far")}, pdb); !apierrors.IsNotFound(err) {
		t.Fatalf("a VM that cannot migrate has a disruption budget (%v): %+v", err, pdb.Spec)
	}
	t.Cleanup(func() { _, _ = run("uncordon", node1) })
	if out, err := run("drain", node1, "--ignore-daemonsets", "--delete-emptydir-data", "--pod-selector="+podspec.LabelVMName+"=far", "--timeout=2m"); err != nil {
		t.Fatalf("drain of a node with an unmigratable LiveMigrate VM: %v\n%s", err, out)
	}
	evicted := &corev1.Pod{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: vm.Status.PodName}, evicted); err == nil && evicted.UID == types.UID(vm.Status.PodUID) {
		t.Errorf("the drain completed but the guest's pod %s is still there", evicted.Name)
	}
	if err := kube.Delete(ctx, vm); err != nil {
		t.Fatal(err)
	}
	cordon(t, node1, false)
}

// cordon marks node unschedulable (on) or schedulable again; the test's end uncordons it.
func cordon(t *testing.T, node string, on bool) {
	t.Helper()
	verb := "uncordon"
	if on {
		verb = "cordon"
		t.Cleanup(func() { _, _ = run("uncordon", node) })
	}
	if out, err := run(verb, node); err != nil {
		t.Fatalf("%s %s: %v\n%s", verb, node, err, out)
	}
}
