package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
	"github.com/virtpod/virtpod/tools/imagebuild/push"
)

// TestUpgrade installs release N+1 (the same tree pushed under another version, so its images
// have other digests) over N with a guest running: the controller rolls onto N+1's image, the
// CRDs are updated in place (same objects, N+1's version label), the running guest's pod is
// untouched (imageUpdatePolicy OnRestart), and a new VM runs N+1's runner (whose guest then
// resolves a Service name). Then the running guest opts in (imageUpdatePolicy LiveMigrate) and
// is moved onto N+1's runner by a live migration, without a reboot. Later tests run on N+1.
func TestUpgrade(t *testing.T) {
	next := os.Getenv("VIRTPOD_RELEASE_NEXT")
	if next == "" {
		t.Fatal("VIRTPOD_RELEASE_NEXT is not set: make test-e2e pushes a second release (make e2e-releases)")
	}
	ctx := context.Background()
	lockN, lockNext := readLock(t, release), readLock(t, next)
	if lockN["virtpod/runner"].Digest == lockNext["virtpod/runner"].Digest {
		t.Fatalf("releases N and N+1 have the same runner image %s: nothing would show which one runs", lockN["virtpod/runner"].Digest)
	}
	ns := namespace(t)
	// Migratable (Masquerade), with a heartbeat that shows a reboot, for the live update at the end.
	old := newVM(ns, "before")
	old.Spec.Guest.NetworkMode = vmv1.NetworkMasquerade
	old.Spec.Guest.KernelArgs = "virtpod.heartbeat"
	if err := kube.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, ns, "before", 0)
	before := runnerPod(t, ns, "before")
	if got := podspec.PodImages(before).Runner; got != lockN["virtpod/runner"].Digest {
		t.Fatalf("a VM of release N runs %s, want N's runner %s", got, lockN["virtpod/runner"].Digest)
	}
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := kube.Get(ctx, client.ObjectKey{Name: "virtualmachines.vm.virtpod.io"}, crd); err != nil {
		t.Fatal(err)
	}
	crdUID := crd.UID

	if err := installRelease(next, installedFile); err != nil {
		t.Fatal(err)
	}
	release = next // what later installs (the Cluster API test) build on
	everyPolicyInstalled(t, ctx, filepath.Join(next, installedFile))

	ctrl := &appsv1.Deployment{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: "virtpod-system", Name: "virtpod-controller"}, ctrl); err != nil {
		t.Fatal(err)
	}
	if got, want := ctrl.Spec.Template.Spec.Containers[0].Image, lockNext["virtpod/controller"].Digest; got != want {
		t.Errorf("controller image after the upgrade: %s, want %s", got, want)
	}
	if r := *ctrl.Spec.Replicas; r < 2 || ctrl.Status.UpdatedReplicas != r || ctrl.Status.AvailableReplicas != r {
		t.Errorf("controller not rolled: %+v", ctrl.Status)
	}
	if err := kube.Get(ctx, client.ObjectKey{Name: "virtualmachines.vm.virtpod.io"}, crd); err != nil {
		t.Fatal(err)
	}
	if crd.UID != crdUID {
		t.Errorf("the VirtualMachine CRD was replaced (UID %s, was %s): that deletes every VM", crd.UID, crdUID)
	}
	if v := crd.Labels["app.kubernetes.io/version"]; v != filepath.Base(next) {
		t.Errorf("the CRD carries version %q, want N+1's %s", v, filepath.Base(next))
	}

	if err := kube.Create(ctx, newVM(ns, "after")); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, ns, "after", 0)
	if got := podspec.PodImages(runnerPod(t, ns, "after")).Runner; got != lockNext["virtpod/runner"].Digest {
		t.Errorf("a VM made after the upgrade runs %s, want N+1's runner %s", got, lockNext["virtpod/runner"].Digest)
	}
	// The new VM's guest is up: it shows the cluster DNS reaches guests too.
	t.Run("guest resolves a Service", func(t *testing.T) { guestResolvesService(t, ns, "after") })
	// Last, so the new controller had the new VM's whole start to disturb the old one.
	vm := waitRunning(t, ns, "before", 0)
	if after := runnerPod(t, ns, "before"); after.UID != before.UID {
		t.Errorf("the running guest's pod was replaced (UID %s, was %s)", after.UID, before.UID)
	}
	if vm.Status.Phase != "Running" {
		t.Errorf("the VM of release N: %+v", vm.Status)
	}

	// The opt-in: the guest moves onto N+1's runner by a live migration the controller makes,
	// to the other node, and its heartbeat goes on (no reboot).
	secondNode(t) // up, for the target
	from, to := vm.Status.Node, ""
	for _, n := range nodeNames(t) {
		if n != from {
			to = n
		}
	}
	labelled(t, to)
	m := &mover{t: t, ctx: ctx, ns: ns, name: "before"}
	beat := m.beat()
	patched := vm.DeepCopy()
	patched.Spec.ImageUpdatePolicy = vmv1.ImageUpdateLiveMigrate
	if err := kube.Patch(ctx, patched, client.MergeFrom(vm)); err != nil {
		t.Fatal(err)
	}
	mig := &vmv1.VirtualMachineMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vmv1.ImageUpdateMigrationName("before", lockNext["virtpod/runner"].Digest)}}
	eventually(t, "the live update's migration "+mig.Name, 2*time.Minute, func() error { return kube.Get(ctx, client.ObjectKeyFromObject(mig), mig) })
	mig = m.ended(mig, vmv1.MigrationSucceeded, vmv1.ReasonSucceeded, 5*time.Minute)
	moved := m.oneGuest(to, beat)
	pod, err := kubeset.CoreV1().Pods(ns).Get(ctx, moved.Status.PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := podspec.PodImages(pod); got.Runner != lockNext["virtpod/runner"].Digest {
		t.Errorf("after the live update the guest runs %s, want N+1's runner %s", got.Runner, lockNext["virtpod/runner"].Digest)
	}
	if moved.Status.RestartCount != 0 || moved.Status.PodName != mig.Status.TargetPod {
		t.Errorf("VM status after the live update: %+v", moved.Status)
	}
	t.Logf("live update %s → %s onto N+1's runner: downtime %d ms", from, to, mig.Status.DowntimeMs)
	// The VMs go before their namespace: deleted with it, a pod may be removed before its VM,
	// which the controller would restart in a new pod while the namespace goes (a boot for
	// nothing, and a pod still terminating at the run's final uninstall check).
	for _, name := range []string{"before", "after"} {
		v := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if err := kube.Delete(ctx, v); err != nil {
			t.Errorf("delete VM %s: %v", name, err)
		}
	}
}

// nodeNames are the cluster's nodes.
func nodeNames(t *testing.T) []string {
	t.Helper()
	var nodes corev1.NodeList
	if err := kube.List(context.Background(), &nodes); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes.Items {
		names = append(names, n.Name)
	}
	return names
}

func runnerPod(t *testing.T, ns, vm string) *corev1.Pod {
	t.Helper()
	p, err := kubeset.CoreV1().Pods(ns).Get(context.Background(), podspec.PodName(vm), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readLock(t *testing.T, dir string) push.Lock {
	t.Helper()
	l, err := push.ReadLock(filepath.Join(dir, "images.json"))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// everyPolicyInstalled: each admission policy and binding the release file holds is on the
// cluster after the upgrade.
func everyPolicyInstalled(t *testing.T, ctx context.Context, file string) {
	t.Helper()
	objs, err := kubeapi.ReadObjects(file)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range objs {
		if !strings.HasSuffix(o.GetKind(), "AdmissionPolicy") && !strings.HasSuffix(o.GetKind(), "AdmissionPolicyBinding") {
			continue
		}
		n++
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := kube.Get(ctx, client.ObjectKey{Name: o.GetName()}, got); err != nil {
			t.Errorf("%s %s of %s after the upgrade: %v", o.GetKind(), o.GetName(), file, err)
		}
	}
	if n < 14 {
		t.Errorf("%s holds %d admission policies and bindings; the release ships at least 7 of each", file, n)
	}
}
