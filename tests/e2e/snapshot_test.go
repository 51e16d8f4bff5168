package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// snapshotRunningGuest is TestPowerVerbs' snapshot steps on its first run (VM pw, booted once):
// a snapshot s1 of the running guest (frozen by the guest's agent), exported; a line the guest
// then writes on its root disk; an incremental snapshot s2 that copies next to nothing; and a
// clone of s2, pw-twin, whose boot overlaps the power steps that follow.
func snapshotRunningGuest(t *testing.T, ns string, first *vmv1.VirtualMachine) {
	t.Helper()
	vmctl := filepath.Join(installVmctl(t), "vmctl")

	// 1. A snapshot of the running guest: whole, frozen by the guest's agent.
	vmctlOK(t, vmctl, "-n", ns, "snapshot", "pw", "s1")
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
	if head, size, err := fileHead(out, 8); err != nil || head != "pw-wrote" || size != 32<<20 {
		t.Errorf("the exported data disk: %q, %d bytes, %v; want the guest's word, 32 MiB", head, size, err)
	}

	// 2. The guest writes a line on its root disk, as it does at each boot.
	con := startPTY(t, vmctl, "-n", ns, "console", "pw")
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
	vmctlOK(t, vmctl, "-n", ns, "snapshot", "pw", "s2")
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

	// 4. A clone of s2, made now so that its boot overlaps the power steps.
	vmctlOK(t, vmctl, "-n", ns, "clone", "pw", "pw-twin", "--snapshot", "s2")
}

// cloneBootedBeside checks the clone snapshotRunningGuest made: it booted beside vm with its own
// claims and address, and holds s2's two lines (so its boot is the third).
func cloneBootedBeside(t *testing.T, ns string, vm *vmv1.VirtualMachine) {
	t.Helper()
	twin := waitRunning(t, ns, "pw-twin", 0)
	guestLog(t, ns, "pw-twin", "VIRTPOD-GUEST-BOOTS 3")
	if twin.Status.PodIP == vm.Status.PodIP || twin.Status.PodIP == "" {
		t.Errorf("the clone's address %q, the VM's %q: want its own", twin.Status.PodIP, vm.Status.PodIP)
	}
	if names := twin.Spec.Guest.ClaimNames(); len(names) != 2 || names[0] != "pw-twin-root" || names[1] != "pw-twin-data" {
		t.Errorf("the clone's claims %v", names)
	}
	if getVM(t, ns, vm.Name).Status.Phase != vmv1.PhaseRunning {
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
