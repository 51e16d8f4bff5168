package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestSnapshotRestoreClone is one VM on local-path claims, booted once, and what vmctl makes of
// it: a snapshot of the running guest (frozen by its agent), exported, a line the guest then writes, an
// incremental snapshot that copies next to nothing, a restore of the first snapshot into the
// stopped VM (its next boot counts on from the first snapshot's count, not the second's), and a
// clone of the second snapshot booting beside it, with its own address and the line it holds.
// Three guest boots in all.
func TestSnapshotRestoreClone(t *testing.T) {
	parallelSafe(t)
	ctx := context.Background()
	ns := namespace(t)
	for name, size := range map[string]string{"snappy-root": "128Mi", "snappy-data": "32Mi"} {
		if err := kube.Create(ctx, newClaim(ns, name, size, corev1.PersistentVolumeFilesystem)); err != nil {
			t.Fatal(err)
		}
	}
	vm := newVM(ns, "snappy")
	vm.Spec.Guest.RootDisk.Size = ptr.To(resource.MustParse("128Mi"))
	vm.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "snappy-root"}
	vm.Spec.Guest.Disks = []vmv1.Disk{{Name: "data", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "snappy-data"}}}
	vm.Spec.Guest.KernelArgs = "rw virtpod.boot-count virtpod.disk-write=data:snappy-wrote"
	if err := kube.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	vmctl := filepath.Join(installVmctl(t), "vmctl")
	first := waitRunning(t, ns, "snappy", 0)
	guestLog(t, ns, "snappy", "VIRTPOD-GUEST-BOOTS 1", "VIRTPOD-GUEST-DISK-WROTE serial=data word=snappy-wrote")
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run("-n", ns, "get", "vm,vmsnap,vmrestore,pods,pvc", "-o", "wide")
			agents, _ := run("-n", "virtpod-system", "logs", "-l", "app.kubernetes.io/name=virtpod-agent", "--tail=30", "--prefix")
			t.Logf("at failure:\n%s\nagents:\n%s", out, agents)
		}
	})

	// 1. A snapshot of the running guest: whole, frozen by the guest's agent.
	vmctlOK(t, vmctl, "-n", ns, "snapshot", "snappy", "s1")
	s1 := getSnapshot(t, ns, "s1")
	if s1.Status.Consistency != vmv1.ConsistencyGuestFrozen || len(s1.Status.Disks) != 2 || s1.Status.Base != "" || s1.Status.SourceNode != first.Status.Node {
		t.Fatalf("s1: %+v", s1.Status)
	}
	for _, d := range s1.Status.Disks {
		if d.CopiedBytes != d.SizeBytes {
			t.Errorf("s1's %s: %d of %d bytes copied, want all of a full snapshot", d.Disk, d.CopiedBytes, d.SizeBytes)
		}
	}

	// s1's data disk, copied off the cluster: what the guest wrote at boot, and a sparse file.
	out := filepath.Join(t.TempDir(), "data.img")
	vmctlOK(t, vmctl, "-n", ns, "export", "s1", "data", "-o", out)
	if head, size, err := fileHead(out, 12); err != nil || head != "snappy-wrote" || size != 32<<20 {
		t.Errorf("the exported data disk: %q, %d bytes, %v; want the guest's word, 32 MiB", head, size, err)
	}

	// 2. The guest writes a line on its root disk, as it does at each boot.
	con := startPTY(t, vmctl, "-n", ns, "console", "snappy")
	if err := con.waitFor(time.Minute, "Connected to the console"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		con.write(t, "echo typed >>/virtpod-boots; sync; echo VIRTPOD-TYPED-$(wc -l </virtpod-boots)\r")
		if con.waitFor(3*time.Second, "VIRTPOD-TYPED-2") == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest's shell never answered:\n%s", con.screen())
		}
	}

	// 3. The next snapshot of the same run copies what changed since s1: next to nothing.
	vmctlOK(t, vmctl, "-n", ns, "snapshot", "snappy", "s2")
	s2 := getSnapshot(t, ns, "s2")
	if s2.Status.Base != "s1" {
		t.Fatalf("s2's base %q, want s1: %+v", s2.Status.Base, s2.Status)
	}
	for _, d := range s2.Status.Disks {
		if d.CopiedBytes*20 > d.SizeBytes {
			t.Errorf("s2's %s: %d of %d bytes copied, want at most 5%% (an incremental copy)", d.Disk, d.CopiedBytes, d.SizeBytes)
		}
	}
	t.Logf("s1 copied %+v; s2 copied %+v", s1.Status.Disks, s2.Status.Disks)

	// A clone of s2, made now so that its boot overlaps the restore below.
	vmctlOK(t, vmctl, "-n", ns, "clone", "snappy", "snappy-twin", "--snapshot", "s2")

	// 4. Stopped, restored to s1, started: the boot counts on from s1's one line, so the line
	// typed after s1 is gone.
	vmctlOK(t, vmctl, "-n", ns, "stop", "snappy")
	vmctlOK(t, vmctl, "-n", ns, "restore", "snappy", "s1")
	restored := getVM(t, ns, "snappy")
	if names := restored.Spec.Guest.ClaimNames(); len(names) != 2 || names[0] == "snappy-root" || names[1] == "snappy-data" {
		t.Fatalf("the restored VM's claims %v: want new ones in place of snappy-root and snappy-data", names)
	}
	vmctlOK(t, vmctl, "-n", ns, "start", "snappy")
	again := waitRunning(t, ns, "snappy", 0)
	guestLog(t, ns, "snappy", "VIRTPOD-GUEST-BOOTS 2", "VIRTPOD-GUEST-DISK serial=data sectors=65536 ro=0 head=snappy-wrote")

	// 5. The clone boots beside it: its own claims and address, and s2's two lines.
	twin := waitRunning(t, ns, "snappy-twin", 0)
	guestLog(t, ns, "snappy-twin", "VIRTPOD-GUEST-BOOTS 3")
	if twin.Status.PodIP == again.Status.PodIP || twin.Status.PodIP == "" {
		t.Errorf("the clone's address %q, the VM's %q: want its own", twin.Status.PodIP, again.Status.PodIP)
	}
	if names := twin.Spec.Guest.ClaimNames(); len(names) != 2 || names[0] != "snappy-twin-root" || names[1] != "snappy-twin-data" {
		t.Errorf("the clone's claims %v", names)
	}
	if getVM(t, ns, "snappy").Status.Phase != vmv1.PhaseRunning {
		t.Error("the VM stopped when its clone started")
	}
}

// vmctlOK runs vmctl and fails the test on a non-zero exit, with its output.
func vmctlOK(t *testing.T, vmctl string, args ...string) string {
	t.Helper()
	out, err := exec.Command(vmctl, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("vmctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("vmctl %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

func getSnapshot(t *testing.T, ns, name string) *vmv1.VirtualMachineSnapshot {
	t.Helper()
	s := &vmv1.VirtualMachineSnapshot{}
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, vmv1.ConditionReady); s.Status.Phase != vmv1.SnapshotSucceeded || c == nil {
		t.Fatalf("snapshot %s: %s %+v", name, s.Status.Phase, c)
	}
	return s
}
