package e2e

import (
	"context"
	"fmt"
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

// TestUpgrade upgrades to the release (N) from the one before (N-1: the same tree pushed under
// another version, with Debian 12's QEMU 7.2 runner as virtpod/runner, as releases were before
// Debian 13's became the default) with a guest running. The suite runs on N, so it first goes
// back to N-1 as an install from N-1 would be, starts the guest there (machine pc-q35-7.2, from
// its runner), then installs N: the controller rolls onto N's image, the CRDs are updated in
// place (same objects, N's version label), the running guest's pod is untouched
// (imageUpdatePolicy OnRestart), and a new VM runs N's runner (QEMU 10.0, machine pc-q35-10.0),
// whose guest serves a ConfigMap share and takes its edit live (virtio-fs on the default
// runner) and resolves a Service name. Then the old guest opts in (imageUpdatePolicy
// LiveMigrate) and is moved onto N's runner by a live migration, without a reboot, keeping its
// machine type on the newer QEMU.
func TestUpgrade(t *testing.T) {
	previous := os.Getenv("VIRTPOD_RELEASE_PREVIOUS")
	if previous == "" {
		t.Fatal("VIRTPOD_RELEASE_PREVIOUS is not set: make test-e2e pushes the release before (make e2e-releases)")
	}
	ctx := context.Background()
	lockPrev, lockN := readLock(t, previous), readLock(t, release)
	if lockPrev["virtpod/runner"].Digest == lockN["virtpod/runner"].Digest {
		t.Fatalf("releases N-1 and N have the same runner image %s: nothing would show which one runs", lockN["virtpod/runner"].Digest)
	}
	if err := installRelease(previous, installedFile); err != nil {
		t.Fatal(err)
	}
	upgraded := false
	t.Cleanup(func() { // later tests run on N, whatever happened here
		if !upgraded {
			if err := installRelease(release, installedFile); err != nil {
				t.Errorf("back to N: %v", err)
			}
		}
	})
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
	if got := podspec.PodImages(before).Runner; got != lockPrev["virtpod/runner"].Digest {
		t.Fatalf("a VM of release N-1 runs %s, want N-1's runner %s", got, lockPrev["virtpod/runner"].Digest)
	}
	machineIs(t, ns, "before", "pc-q35-7.2")
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := kube.Get(ctx, client.ObjectKey{Name: "virtualmachines.vm.virtpod.io"}, crd); err != nil {
		t.Fatal(err)
	}
	crdUID := crd.UID

	if err := installRelease(release, installedFile); err != nil {
		t.Fatal(err)
	}
	upgraded = true
	everyPolicyInstalled(t, ctx, filepath.Join(release, installedFile))

	ctrl := &appsv1.Deployment{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: "virtpod-system", Name: "virtpod-controller"}, ctrl); err != nil {
		t.Fatal(err)
	}
	if got, want := ctrl.Spec.Template.Spec.Containers[0].Image, lockN["virtpod/controller"].Digest; got != want {
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
	if v := crd.Labels["app.kubernetes.io/version"]; v != filepath.Base(release) {
		t.Errorf("the CRD carries version %q, want N's %s", v, filepath.Base(release))
	}

	// The default runner serves virtio-fs shares: a ConfigMap share, with no runner image named.
	after := newVM(ns, "after")
	withConfShare(t, after)
	if err := kube.Create(ctx, after); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, ns, "after", 0)
	if got := podspec.PodImages(runnerPod(t, ns, "after")).Runner; got != lockN["virtpod/runner"].Digest {
		t.Errorf("a VM made after the upgrade runs %s, want N's runner %s", got, lockN["virtpod/runner"].Digest)
	}
	machineIs(t, ns, "after", "pc-q35-10.0")
	// The new VM's guest is up: its share takes a ConfigMap's edit live, and the cluster DNS
	// reaches guests too.
	t.Run("ConfigMap share on the default runner", func(t *testing.T) { checkConfShare(t, ns, "after") })
	t.Run("guest resolves a Service", func(t *testing.T) { guestResolvesService(t, ns, "after") })
	// Last, so the new controller had the new VM's whole start to disturb the old one.
	vm := waitRunning(t, ns, "before", 0)
	if after := runnerPod(t, ns, "before"); after.UID != before.UID {
		t.Errorf("the running guest's pod was replaced (UID %s, was %s)", after.UID, before.UID)
	}
	if vm.Status.Phase != "Running" {
		t.Errorf("the VM of release N: %+v", vm.Status)
	}

	// The opt-in: the guest moves onto N's runner by a live migration the controller makes, to
	// the other node, and its heartbeat goes on (no reboot): QEMU 7.2 to 10.0, machine kept.
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
	mig := &vmv1.VirtualMachineMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vmv1.ImageUpdateMigrationName("before", lockN["virtpod/runner"].Digest)}}
	eventually(t, "the live update's migration "+mig.Name, 2*time.Minute, func() error { return kube.Get(ctx, client.ObjectKeyFromObject(mig), mig) })
	mig = m.ended(mig, vmv1.MigrationSucceeded, vmv1.ReasonSucceeded, 5*time.Minute)
	moved := m.oneGuest(to, beat)
	pod, err := kubeset.CoreV1().Pods(ns).Get(ctx, moved.Status.PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := podspec.PodImages(pod); got.Runner != lockN["virtpod/runner"].Digest {
		t.Errorf("after the live update the guest runs %s, want N's runner %s", got.Runner, lockN["virtpod/runner"].Digest)
	}
	if moved.Status.RestartCount != 0 || moved.Status.PodName != mig.Status.TargetPod || moved.Status.Machine != "pc-q35-7.2" {
		t.Errorf("VM status after the live update: %+v", moved.Status)
	}
	if m := pod.Annotations[vmv1.AnnotationGuestMachine]; m != "pc-q35-7.2" {
		t.Errorf("N's runner reports the moved guest on machine %q, want the pc-q35-7.2 it started on", m)
	}
	t.Logf("live update %s → %s onto N's runner: downtime %d ms", from, to, mig.Status.DowntimeMs)
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

// machineIs waits for the VM's pinned machine type, as its runner reported it.
func machineIs(t *testing.T, ns, name, want string) {
	t.Helper()
	eventually(t, name+"'s status.machine "+want, time.Minute, func() error {
		if got := getVM(t, ns, name).Status.Machine; got != want {
			return fmt.Errorf("status.machine %q", got)
		}
		return nil
	})
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
