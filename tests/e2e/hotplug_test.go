package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// hotplugAcrossVMs is TestPowerVerbs' hotplug steps (docs/hotplug.md), on its first run and its
// clone, both booted already, in a namespace at Pod Security restricted: a local-path claim is
// attached to the running guest pw, which writes its word on it (virtpod.disk-write=hot:pw-hot);
// detached, the guest releases it; attached to the clone pw-twin, which reads the word. Then a
// blank disk is attached to pw, which its restart makes a disk of the next pod.
func hotplugAcrossVMs(t *testing.T, ctl powerCtl, ns string, pw *vmv1.VirtualMachine) {
	t.Helper()
	ctx := context.Background()
	if err := kube.Create(ctx, newClaim(ns, "pw-hot", "16Mi", corev1.PersistentVolumeFilesystem)); err != nil {
		t.Fatal(err)
	}
	out := ctl.ok(t, "disk", "attach", "pw", "hot", "--claim", "pw-hot")
	if err := contains(out, "disk hot attached", "served by attachment pod "+podspec.AttachmentPodName("pw", "hot")); err != nil {
		t.Error(err)
	}
	guestLog(t, ns, "pw", "VIRTPOD-GUEST-DISK-ADDED serial=hot sectors=32768 ro=0", "VIRTPOD-GUEST-DISK-WROTE serial=hot word=pw-hot")
	att := &corev1.Pod{}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: podspec.AttachmentPodName("pw", "hot")}, att); err != nil {
		t.Fatal(err)
	}
	if att.Spec.NodeName != pw.Status.Node {
		t.Errorf("the attachment pod runs on %s, the guest on %s", att.Spec.NodeName, pw.Status.Node)
	}
	show(t, ns, "hot attached to pw")

	ctl.ok(t, "disk", "detach", "pw", "hot")
	guestLog(t, ns, "pw", "VIRTPOD-GUEST-DISK-REMOVED")
	if st := getVM(t, ns, "pw").Status.Disks; len(st) != 0 {
		t.Errorf("status.disks after the detach: %+v", st)
	}
	eventually(t, "the attachment pod gone", 2*time.Minute, func() error { return absent(ctx, ns, podspec.AttachmentPodName("pw", "hot")) })

	// The clone, booted beside pw from its snapshot, reads what pw wrote.
	cloneBootedBeside(t, ns, pw)
	out = ctl.ok(t, "disk", "attach", "pw-twin", "hot", "--claim", "pw-hot")
	guestLog(t, ns, "pw-twin", "VIRTPOD-GUEST-DISK-ADDED serial=hot sectors=32768 ro=0 head=pw-hot")
	t.Logf("the clone read pw's word from the claim:\n%s", out)

	// A blank disk that stays on pw: the restart makes it a disk of the next pod.
	ctl.ok(t, "disk", "attach", "pw", "scratch", "--empty", "8Mi")
	guestLog(t, ns, "pw", "VIRTPOD-GUEST-DISK-ADDED serial=scratch sectors=16384 ro=0")
	if m := getVM(t, ns, "pw"); !slices.ContainsFunc(m.Status.Disks, func(d vmv1.HotplugDiskStatus) bool {
		return d.Name == "scratch" && d.State == vmv1.DiskAttached && d.AttachmentPod != ""
	}) {
		t.Errorf("status.disks with scratch attached: %+v", m.Status.Disks)
	}
}

// hotplugSurvivedRestart checks, after pw's restart, that scratch is a disk of the new pod: the
// guest saw it at boot, status.disks has it on its slot with no attachment pod, and the
// attachment pod is gone.
func hotplugSurvivedRestart(t *testing.T, ns string) {
	t.Helper()
	guestLog(t, ns, "pw", "VIRTPOD-GUEST-DISK serial=scratch sectors=16384 ro=0")
	eventually(t, "scratch held by the runner pod", 2*time.Minute, func() error {
		vm := getVM(t, ns, "pw")
		if !slices.ContainsFunc(vm.Status.Disks, func(d vmv1.HotplugDiskStatus) bool {
			return d.Name == "scratch" && d.State == vmv1.DiskAttached && d.AttachmentPod == ""
		}) {
			return fmt.Errorf("status.disks %+v", vm.Status.Disks)
		}
		return absent(context.Background(), ns, podspec.AttachmentPodName("pw", "scratch"))
	})
}

// absent says whether pod name is gone from ns.
func absent(ctx context.Context, ns, name string) error {
	if _, err := kubeset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		return fmt.Errorf("pod %s/%s is still there", ns, name)
	}
	return nil
}
