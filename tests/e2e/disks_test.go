package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// blockPV makes a loop device over a 16 MiB file that starts with word, and a static local
// PersistentVolume of volumeMode Block on it, pre-bound to claim in ns; both are removed when the
// test ends. It returns the backing file, which shows what the guest wrote.
func blockPV(t *testing.T, ns, claim, word string) string {
	t.Helper()
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "block.img")
	b := make([]byte, 16<<20)
	copy(b, word)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", file).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	var nodes corev1.NodeList
	if err := kube.List(ctx, &nodes); err != nil || len(nodes.Items) == 0 {
		t.Fatalf("nodes: %v", err)
	}
	block := corev1.PersistentVolumeBlock
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + claim},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:                    &block,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: claim},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dev}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{nodes.Items[0].Name}}},
			}}}},
		},
	}
	bindStatic(t, ns, claim, pv)
	return file
}

// bindStatic creates the static PersistentVolume pv (removed when the test ends) and claim in
// ns pre-bound to it: no class, the volume's capacity, mode and access modes.
func bindStatic(t *testing.T, ns, claim string, pv *corev1.PersistentVolume) {
	t.Helper()
	ctx := context.Background()
	if err := kube.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.Delete(context.Background(), pv) })
	pvc := newClaim(ns, claim, "16Mi", *pv.Spec.VolumeMode)
	pvc.Spec.Resources.Requests = pv.Spec.Capacity
	pvc.Spec.AccessModes = pv.Spec.AccessModes
	pvc.Spec.StorageClassName = new(string) // static: no class, bound to pv
	pvc.Spec.VolumeName = pv.Name
	if err := kube.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
}

// guestLog waits for the current runner pod's logs (the guest console) to hold every line.
func guestLog(t *testing.T, ns, vm string, lines ...string) string {
	t.Helper()
	var logs string
	eventually(t, fmt.Sprintf("the guest console of %s shows %q", vm, lines), 4*time.Minute, func() error {
		logs = podLogs(ns, podspec.PodName(vm))
		return contains(logs, lines...)
	})
	return logs
}

// TestDisksKeepData is one VM, booted three times: its root disk is a claim of the default
// (dynamic) class filled from the guest image on the first boot, with a data disk on a Block PV
// (a loop device) and a ConfigMap disk. Each boot counts itself on the root disk, synced; the
// count survives QEMU killed and the pod deleted, each time in a new pod. After its second boot
// it is suspended and resumed (suspendAndResume). A second VM naming the same root claim is
// held, naming the first.
func TestDisksKeepData(t *testing.T) {
	parallelSafe(t)
	ctx := context.Background()
	ns := namespace(t)
	for name, size := range map[string]string{"keeper-root": "256Mi", "keeper-state": "384Mi"} {
		if err := kube.Create(ctx, newClaim(ns, name, size, corev1.PersistentVolumeFilesystem)); err != nil {
			t.Fatal(err)
		}
	}
	backing := blockPV(t, ns, "keeper-raw", "from-host")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keeper-config"}, Data: map[string]string{"app.conf": "port=8080", "colour": "blue"}}
	if err := kube.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	vm := newVM(ns, "keeper")
	vm.Spec.Guest.KernelArgs = "rw virtpod.boot-count virtpod.disk-write=raw:from-guest virtpod.heartbeat"
	vm.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "keeper-root"}
	// Suspendable: every writable disk is a claim, and its state has a claim of its own.
	vm.Spec.Guest.StateClaim = &vmv1.StateClaim{ClaimName: "keeper-state"}
	vm.Spec.Guest.NetworkMode = vmv1.NetworkMasquerade
	vm.Spec.Guest.Disks = []vmv1.Disk{
		{Name: "raw", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "keeper-raw"}},
		{Name: "config", ConfigMap: &vmv1.ConfigMapDiskSource{Name: "keeper-config"}},
	}
	if err := kube.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	got := waitRunning(t, ns, "keeper", 0)
	if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionDisksReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("DisksReady %+v", c)
	}
	logs := guestLog(t, ns, "keeper", "VIRTPOD-GUEST-BOOTS 1", "VIRTPOD-GUEST-DISK-WROTE serial=raw word=from-guest",
		"VIRTPOD-GUEST-DISK serial=raw sectors=32768 ro=0 head=from-host",
		"VIRTPOD-GUEST-DISK-FILE serial=config name=app.conf content=port=8080",
		"VIRTPOD-GUEST-DISK-FILE serial=config name=colour content=blue")
	if !strings.Contains(logs, "label=config") {
		t.Errorf("the ConfigMap disk is not labelled with its name")
	}
	eventually(t, "the guest's write on the Block PV's device", time.Minute, func() error {
		f, err := os.Open(backing)
		if err != nil {
			return err
		}
		defer f.Close()
		b := make([]byte, 10)
		_, _ = f.Read(b)
		if string(b) != "from-guest" {
			return fmt.Errorf("the device starts with %q", b)
		}
		return nil
	})
	var pvc corev1.PersistentVolumeClaim
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "keeper-root"}, &pvc); err != nil || pvc.Status.Phase != corev1.ClaimBound {
		t.Fatalf("the root claim after the first boot: %s %v", pvc.Status.Phase, err)
	}

	// A second VM on the same root claim waits, naming the first, and gets no pod.
	thief := newVM(ns, "thief")
	thief.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "keeper-root"}
	if err := kube.Create(ctx, thief); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the second VM held by ClaimInUse", time.Minute, func() error {
		v := &vmv1.VirtualMachine{}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(thief), v); err != nil {
			return err
		}
		c := meta.FindStatusCondition(v.Status.Conditions, vmv1.ConditionDisksReady)
		if c == nil || c.Reason != vmv1.ReasonClaimInUse || !strings.Contains(c.Message, "VirtualMachine keeper") {
			return fmt.Errorf("DisksReady %+v", c)
		}
		return nil
	})
	if _, err := kubeset.CoreV1().Pods(ns).Get(ctx, podspec.PodName("thief"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the second VM has a runner pod: %v", err)
	}

	// QEMU killed after the guest synced: the next boot, in a new pod, counts 2.
	uid := got.Status.PodUID
	if err := syscall.Kill(findQEMU(t, "keeper"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	got = waitRunning(t, ns, "keeper", 1)
	if got.Status.PodUID == uid {
		t.Fatal("the guest came back in the same pod")
	}
	guestLog(t, ns, "keeper", "VIRTPOD-GUEST-BOOTS 2", "VIRTPOD-GUEST-DISK serial=raw sectors=32768 ro=0 head=from-guest")
	suspendAndResume(t, ns, "keeper", got)

	// The pod deleted: the next boot counts 3.
	uid = got.Status.PodUID
	if err := kubeset.CoreV1().Pods(ns).Delete(ctx, podspec.PodName("keeper"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new runner pod after kubectl delete pod", 4*time.Minute, func() error {
		v := &vmv1.VirtualMachine{}
		if err := kube.Get(ctx, types.NamespacedName{Namespace: ns, Name: "keeper"}, v); err != nil {
			return err
		}
		if v.Status.Phase != vmv1.PhaseRunning || v.Status.PodUID == uid || v.Status.PodUID == "" {
			return fmt.Errorf("phase %s pod %s", v.Status.Phase, v.Status.PodUID)
		}
		return nil
	})
	guestLog(t, ns, "keeper", "VIRTPOD-GUEST-BOOTS 3")

	// Deleting the VMs leaves the claims.
	if err := kube.Delete(ctx, thief); err != nil {
		t.Fatal(err)
	}
	if err := kube.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the VM gone", 2*time.Minute, func() error {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(got), &vmv1.VirtualMachine{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: "keeper-root"}, &pvc); err != nil || pvc.DeletionTimestamp != nil {
		t.Fatalf("the deleted VM's root claim: %v %v", err, pvc.DeletionTimestamp)
	}
}
