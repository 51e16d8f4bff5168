package vm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// storageClass makes a class binding as mode; classes are cluster-wide, so each test names its own.
func storageClass(t *testing.T, name string, mode storagev1.VolumeBindingMode) string {
	t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "example.com/test", VolumeBindingMode: &mode}
	if err := env.Client.Create(context.Background(), sc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

func claim(t *testing.T, ns, name, class string, mode corev1.PersistentVolumeMode) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(class), VolumeMode: &mode,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if err := env.Client.Create(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
	return pvc
}

// bound marks a claim Bound as the PV controller would (envtest runs none).
func bound(t *testing.T, pvc *corev1.PersistentVolumeClaim) {
	t.Helper()
	pvc.Status.Phase = corev1.ClaimBound
	pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
	if err := env.Client.Status().Update(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
}

func diskVM(ns, name string, disks ...vmv1.Disk) *vmv1.VirtualMachine {
	vm := kubeapi.SampleVM(ns, name)
	vm.Spec.Guest.Disks = disks
	return vm
}

func claimDisk(name, claim string, readOnly bool) vmv1.Disk {
	return vmv1.Disk{Name: name, PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: claim, ReadOnly: readOnly}}
}

// held waits for the VM to be held for its disks: no runner pod, DisksReady False with reason,
// and Scheduled and Ready carrying the same words, each containing every fragment.
func held(t *testing.T, vm *vmv1.VirtualMachine, reason string, fragments ...string) {
	t.Helper()
	got := condition(t, vm, vmv1.PhasePending, vmv1.ConditionDisksReady, metav1.ConditionFalse, reason)
	c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionDisksReady)
	for _, f := range fragments {
		if !strings.Contains(c.Message, f) {
			t.Errorf("DisksReady %q lacks %q", c.Message, f)
		}
	}
	for _, ct := range []string{vmv1.ConditionScheduled, vmv1.ConditionReady} {
		if o := meta.FindStatusCondition(got.Status.Conditions, ct); o == nil || o.Reason != reason || o.Message != c.Message {
			t.Errorf("%s = %+v, want DisksReady's reason and message", ct, o)
		}
	}
	if _, err := runnerPod(vm); !apierrors.IsNotFound(err) {
		t.Fatalf("a runner pod exists for a VM held by its disks: %v", err)
	}
}

// TestClaimConditions: a missing claim, a claim Pending under an Immediate class, a lost one
// each hold the VM with the claim's name and what to do; a claim Pending under
// WaitForFirstConsumer does not (it binds once the runner pod is scheduled), and its volumeMode
// decides between a mount and a device. Deleting the VM leaves its claims.
func TestClaimConditions(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	wffc := storageClass(t, "disks-wffc", storagev1.VolumeBindingWaitForFirstConsumer)
	immediate := storageClass(t, "disks-immediate", storagev1.VolumeBindingImmediate)

	vm := create(t, diskVM(ns, "db", claimDisk("data", "db-data", false)))
	held(t, vm, vmv1.ReasonClaimNotFound, `PersistentVolumeClaim "db-data" (disk data) does not exist in namespace `+ns, "create it")

	pvc := claim(t, ns, "db-data", immediate, corev1.PersistentVolumeBlock)
	held(t, vm, vmv1.ReasonClaimPending, `"db-data" is Pending`, `StorageClass "disks-immediate" binds Immediately`)

	bound(t, pvc)
	got := condition(t, vm, vmv1.PhaseScheduling, vmv1.ConditionDisksReady, metav1.ConditionTrue, vmv1.ReasonDisksReady)
	if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionDisksReady); c.Message != "claims db-data ready" {
		t.Errorf("DisksReady message %q", c.Message)
	}
	pod := waitPod(t, vm, "")
	r := pod.Spec.Containers[0]
	if len(r.VolumeDevices) != 1 || r.VolumeDevices[0].DevicePath != "/dev/virtpod/data" || !strings.Contains(strings.Join(r.Args, " "), "--disk=name=data,kind=block,path=/dev/virtpod/data") {
		t.Fatalf("a Block claim is not the runner's device: %+v %q", r.VolumeDevices, r.Args)
	}

	pvc.Status.Phase = corev1.ClaimLost
	if err := env.Client.Status().Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "DisksReady ClaimLost on a running VM", func() error {
		c := meta.FindStatusCondition(getVM(t, vm).Status.Conditions, vmv1.ConditionDisksReady)
		if c == nil || c.Reason != vmv1.ReasonClaimLost || !strings.Contains(c.Message, "restore the PersistentVolume") {
			return fmt.Errorf("DisksReady %+v", c)
		}
		return nil
	})

	// WaitForFirstConsumer: Pending is the normal state before the pod, and must not hold.
	vm2 := create(t, diskVM(ns, "cache", claimDisk("scratch", "cache-data", false)))
	held(t, vm2, vmv1.ReasonClaimNotFound, `"cache-data"`)
	claim(t, ns, "cache-data", wffc, corev1.PersistentVolumeFilesystem)
	got = condition(t, vm2, vmv1.PhaseScheduling, vmv1.ConditionDisksReady, metav1.ConditionTrue, vmv1.ReasonDisksReady)
	if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionDisksReady); !strings.Contains(c.Message, "cache-data bind when the runner pod is scheduled: WaitForFirstConsumer") {
		t.Errorf("DisksReady message %q", c.Message)
	}
	pod = waitPod(t, vm2, "")
	if a := strings.Join(pod.Spec.Containers[0].Args, " "); !strings.Contains(a, "--disk=name=scratch,kind=file,path=/virtpod/disks/scratch,size-mib=1024") {
		t.Fatalf("a Filesystem claim is not a file disk of the claim's request: %q", a)
	}

	// Deleting a VM leaves its claims, as a StatefulSet does.
	if err := env.Client.Delete(ctx, vm2); err != nil {
		t.Fatal(err)
	}
	eventually(t, "VM gone", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vm2), &vmv1.VirtualMachine{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("VM still there: %v", err)
		}
		return nil
	})
	left := &corev1.PersistentVolumeClaim{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cache-data"}, left); err != nil || left.DeletionTimestamp != nil || len(left.OwnerReferences) != 0 {
		t.Fatalf("the deleted VM's claim: %v %+v", err, left.ObjectMeta)
	}
}

// TestClaimInUse: of two VMs writing one claim, the first created runs and the second is held,
// naming the first; halting the first lets the second start; VMs that only read share a claim.
func TestClaimInUse(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	class := storageClass(t, "disks-wffc", storagev1.VolumeBindingWaitForFirstConsumer)
	claim(t, ns, "shared", class, corev1.PersistentVolumeFilesystem)
	first := create(t, diskVM(ns, "first", claimDisk("data", "shared", false)))
	bind(t, waitPod(t, first, ""), "disks-node")
	second := kubeapi.SampleVM(ns, "second")
	second.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "shared"}
	create(t, second)
	held(t, second, vmv1.ReasonClaimInUse, `PersistentVolumeClaim "shared" is in use by VirtualMachine first`, "stop first (runStrategy: Halted)")

	// Halted, the first VM's pod shuts down (on a node, with no kubelet here, it stays
	// terminating): its guest may still write, so the second waits for the pod to be gone.
	// As kubectl edit would: the controller writes the VM's status meanwhile.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		halt := getVM(t, first)
		halt.Spec.RunStrategy = vmv1.RunHalted
		return env.Client.Update(ctx, halt)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first VM's pod terminating", func() error {
		p, err := runnerPod(first)
		if err != nil || p.DeletionTimestamp == nil {
			return fmt.Errorf("pod %v, %v", p.DeletionTimestamp, err)
		}
		return nil
	})
	held(t, second, vmv1.ReasonClaimInUse, `in use by VirtualMachine first (runner pod first-runner)`)
	// The VM goes; its pod (no garbage collector here) stays until deleted: only the pod's own
	// deletion can wake the second VM now.
	if err := env.Client.Delete(ctx, getVM(t, first)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first VM gone", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(first), &vmv1.VirtualMachine{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	held(t, second, vmv1.ReasonClaimInUse, `in use by VirtualMachine first (runner pod first-runner)`)
	old, _ := runnerPod(first)
	if err := env.Client.Delete(ctx, old, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waitPod(t, second, "")
	if _, err := runnerPod(first); !apierrors.IsNotFound(err) {
		t.Fatalf("two runner pods on one writable claim: %v", err)
	}

	readers := []*vmv1.VirtualMachine{
		create(t, diskVM(ns, "reader-a", claimDisk("ref", "reference", true))),
		create(t, diskVM(ns, "reader-b", claimDisk("ref", "reference", true))),
	}
	claim(t, ns, "reference", class, corev1.PersistentVolumeFilesystem)
	for _, r := range readers {
		waitPod(t, r, "")
	}
}

// TestConfigMapAndSecretDisks: a missing ConfigMap holds the VM until it is created; a Secret
// is never read (its name is in the message, the kubelet reports a missing one); the condition
// goes away with the disks.
func TestConfigMapAndSecretDisks(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	vm := create(t, diskVM(ns, "app",
		vmv1.Disk{Name: "config", ConfigMap: &vmv1.ConfigMapDiskSource{Name: "app-config"}},
		vmv1.Disk{Name: "creds", Secret: &vmv1.SecretDiskSource{SecretName: "app-creds"}}))
	held(t, vm, vmv1.ReasonConfigMapNotFound, `ConfigMap "app-config" (disk config) does not exist in namespace `+ns, "create it")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-config"}, Data: map[string]string{"app.conf": "port=8080"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	got := condition(t, vm, vmv1.PhaseScheduling, vmv1.ConditionDisksReady, metav1.ConditionTrue, vmv1.ReasonDisksReady)
	if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionDisksReady); !strings.Contains(c.Message, "ConfigMaps app-config exist") ||
		!strings.Contains(c.Message, "Secrets app-creds are not read by virtpod") {
		t.Errorf("DisksReady message %q", c.Message)
	}
	pod := waitPod(t, vm, "")
	var sawCM, sawSecret bool
	for _, v := range pod.Spec.Volumes {
		sawCM = sawCM || v.ConfigMap != nil && v.ConfigMap.Name == "app-config"
		sawSecret = sawSecret || v.Secret != nil && v.Secret.SecretName == "app-creds"
	}
	if !sawCM || !sawSecret {
		t.Fatalf("the pod does not mount the ConfigMap and the Secret by reference: %+v", pod.Spec.Volumes)
	}

	update := getVM(t, vm)
	update.Spec.Guest.Disks = nil
	if err := env.Client.Update(ctx, update); err != nil {
		t.Fatal(err)
	}
	eventually(t, "DisksReady removed with the disks", func() error {
		if c := meta.FindStatusCondition(getVM(t, vm).Status.Conditions, vmv1.ConditionDisksReady); c != nil {
			return fmt.Errorf("still %+v", c)
		}
		return nil
	})
}
