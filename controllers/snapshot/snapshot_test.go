package snapshot_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// A running guest's snapshot: the plan, the claims and the copier on the guest's node, the mark
// for the node agent, its answer, and the VM's last snapshot; a second snapshot of the same run
// builds on the first, and its failure leaves nothing behind.
func TestSnapshotOfRunningGuest(t *testing.T) {
	ns, node := namespace(t), env.TestNode(t, "a")
	vm := vmOnClaims(t, ns, "db", vmv1.RunAlways)
	source := running(t, vm, node)

	s1 := snapshot(t, ns, "s1", vm.Name)
	var got *vmv1.VirtualMachineSnapshot
	eventually(t, "s1 planned", func() error {
		got = get(t, s1)
		if got.Status.Phase != vmv1.SnapshotInProgress || len(got.Status.Disks) != 2 {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
	if d := got.Status.Disks; d[0].Disk != "root" || d[0].ClaimName != "s1-root" || d[0].SourceClaim != "db-root" || d[1].Disk != "data" || d[1].ClaimName != "s1-data" || d[0].SizeBytes != 1<<30 {
		t.Errorf("disks %+v: want root and data (the read-only disk is not copied) onto s1-root and s1-data, 1 GiB", d)
	}
	if got.Status.SourcePod != source.Name || got.Status.SourceNode != node || got.Status.Base != "" || got.Status.Bitmap == "" {
		t.Errorf("status %+v: want the runner pod on %s, no base, a bitmap", got.Status, node)
	}
	for _, c := range []string{"s1-root", "s1-data"} {
		pvc := get(t, claim(ns, c))
		if !ownedBy(pvc, got.UID) || pvc.Spec.Resources.Requests.Storage().String() != "1Gi" || *pvc.Spec.StorageClassName != "standard" {
			t.Errorf("claim %s: owners %v, request %v, class %v; want the snapshot's, 1Gi, standard", c, pvc.OwnerReferences, pvc.Spec.Resources.Requests, pvc.Spec.StorageClassName)
		}
	}
	cp := copier(t, ns, "s1-snapshot", node)
	if err := argsHave(cp, "disk-target", "--target=drive=root,file=/virtpod/copy/s1-root/disk.img", "--target=drive=disk-data,file=/virtpod/copy/s1-data/disk.img"); err != nil {
		t.Error(err)
	}
	if a := cp.Spec.Affinity; a == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0] != node {
		t.Errorf("copier affinity %+v: want the guest's node %s", a, node)
	}
	eventually(t, "the runner pod marked for the agent", func() error {
		if p, _ := getPod(ns, source.Name); p.Annotations[vmv1.AnnotationSnapshot] != "s1" {
			return fmt.Errorf("annotations %v", p.Annotations)
		}
		return nil
	})
	answer(t, source, controlapi.SnapshotResult{Snapshot: "s1", Status: controlapi.BackupStatus{Consistency: controlapi.ConsistencyGuestFrozen, Bitmap: got.Status.Bitmap,
		Drives: []controlapi.BackupDriveStatus{{Drive: "root", Size: 1 << 30, Copied: 1 << 30}, {Drive: "disk-data", Size: 1 << 30, Copied: 1 << 29}}}})
	if p := get(t, s1); p.Status.Phase != vmv1.SnapshotInProgress {
		t.Errorf("phase %s before the copier ended: the copier's flush decides", p.Status.Phase)
	}
	ends(t, cp, "")
	got = phase(t, s1, vmv1.SnapshotSucceeded, vmv1.ReasonReady, snapPhase)
	if got.Status.Consistency != vmv1.ConsistencyGuestFrozen || got.Status.Disks[1].CopiedBytes != 1<<29 || got.Status.CompletionTime == nil {
		t.Errorf("status %+v", got.Status)
	}
	eventually(t, "the VM names its last snapshot", func() error {
		if l := get(t, vm).Status.LastSnapshot; l == nil || l.Name != "s1" || l.Bitmap != got.Status.Bitmap || l.PodUID != string(source.UID) {
			return fmt.Errorf("lastSnapshot %+v", l)
		}
		return nil
	})
	eventually(t, "the runner pod unmarked", func() error {
		if p, _ := getPod(ns, source.Name); p.Annotations[vmv1.AnnotationSnapshot] != "" || p.Annotations[vmv1.AnnotationSnapshotResult] != "" {
			return fmt.Errorf("annotations %v", p.Annotations)
		}
		return nil
	})
	deleted(t, cp)

	// The next snapshot of the same run copies only what changed: its copier starts each
	// target from s1's.
	s2 := snapshot(t, ns, "s2", vm.Name)
	cp2 := copier(t, ns, "s2-snapshot", node)
	if got := get(t, s2); got.Status.Base != "s1" {
		t.Errorf("s2's base %q, want s1", got.Status.Base)
	}
	if err := argsHave(cp2, "--target=drive=root,file=/virtpod/copy/s2-root/disk.img,base=/virtpod/copy/s1-root/disk.img"); err != nil {
		t.Error(err)
	}
	for _, m := range cp2.Spec.Containers[0].VolumeMounts {
		if strings.Contains(m.MountPath, "s1-") != m.ReadOnly {
			t.Errorf("mount %+v: s1's claims read-only, s2's writable", m)
		}
	}
	answer(t, source, controlapi.SnapshotResult{Snapshot: "s2", Status: controlapi.BackupStatus{Error: "drive disk-data has no bitmap: take a full one"}})
	failed := phase(t, s2, vmv1.SnapshotFailed, vmv1.ReasonCopyFailed, snapPhase)
	if c := meta.FindStatusCondition(failed.Status.Conditions, vmv1.ConditionReady); !strings.Contains(c.Message, "take a full one") {
		t.Errorf("Ready message %q: want the runner's words", c.Message)
	}
	for _, c := range []*corev1.PersistentVolumeClaim{claim(ns, "s2-root"), claim(ns, "s2-data")} {
		deleted(t, c)
	}
	deleted(t, cp2)
	if full, failed := counted(t, "virtpod_snapshots_total", map[string]string{"result": "Ready", "kind": "full"}),
		counted(t, "virtpod_snapshots_total", map[string]string{"result": "CopyFailed", "kind": "incremental"}); full < 1 || failed < 1 {
		t.Errorf("virtpod_snapshots_total: %v full Ready, %v incremental CopyFailed; want each counted", full, failed)
	}
	if l := get(t, vm).Status.LastSnapshot; l == nil || l.Name != "s1" {
		t.Errorf("lastSnapshot %+v after a failed snapshot: want s1 still", l)
	}
	if c := get(t, claim(ns, "s1-root")); c.DeletionTimestamp != nil {
		t.Error("s1's claim is being deleted: a failed snapshot deletes its own claims only")
	}
}

// A stopped VM's snapshot copies its claims' files; the VM does not start on them meanwhile. A
// restore is refused on a running VM, replaces a stopped VM's claims, and a restore under a new
// name makes a clone.
func TestStoppedSnapshotRestoreAndClone(t *testing.T) {
	ns, node := namespace(t), env.TestNode(t, "b")
	vm := vmOnClaims(t, ns, "web", vmv1.RunHalted)
	s := snapshot(t, ns, "cold", vm.Name)
	cp := copier(t, ns, "cold-snapshot", node)
	if err := argsHave(cp, "disk-copy", "--copy=from=/virtpod/copy/web-root/disk.img,to=/virtpod/copy/cold-root/disk.img", "--copy=from=/virtpod/copy/web-data/disk.img,to=/virtpod/copy/cold-data/disk.img"); err != nil {
		t.Error(err)
	}
	if _, control := cp.Spec.Containers[0].Resources.Limits[vmv1.ResourceControl]; cp.Spec.Affinity != nil || control {
		t.Errorf("a stopped VM's copier needs no node and no control directory: %+v", cp.Spec)
	}

	// Started while its disks are copied, the VM waits for the copier.
	setStrategy(t, vm, vmv1.RunAlways)
	eventually(t, "the VM held by the copy", func() error {
		c := meta.FindStatusCondition(get(t, vm).Status.Conditions, vmv1.ConditionDisksReady)
		if c == nil || c.Reason != vmv1.ReasonClaimInUse || !strings.Contains(c.Message, "being copied by cold") {
			return fmt.Errorf("DisksReady %+v", c)
		}
		return nil
	})
	if _, err := getPod(ns, podspec.PodName(vm.Name)); err == nil {
		t.Fatal("a runner pod was made while the copier had the VM's claims")
	}
	ends(t, cp, "")
	got := phase(t, s, vmv1.SnapshotSucceeded, vmv1.ReasonReady, snapPhase)
	if got.Status.Consistency != vmv1.ConsistencyOffline || got.Status.SourcePod != "" {
		t.Errorf("status %+v: want Offline, no source pod", got.Status)
	}
	eventually(t, "the VM starts once the copy ended", func() error {
		_, err := getPod(ns, podspec.PodName(vm.Name))
		return err
	})

	// A restore onto a VM that runs (or will) is refused with the fix.
	r0 := restore(t, ns, "r0", "cold", vm.Name)
	refused := phase(t, r0, vmv1.SnapshotFailed, vmv1.ReasonVMRunning, restorePhase)
	if c := meta.FindStatusCondition(refused.Status.Conditions, vmv1.ConditionReady); !strings.Contains(c.Message, "vmctl stop web") {
		t.Errorf("refusal %q: want the fix", c.Message)
	}

	setStrategy(t, vm, vmv1.RunHalted)
	eventually(t, "VM stopped", func() error {
		if g := get(t, vm); g.Status.PodUID != "" || g.Status.Phase != vmv1.PhaseStopped {
			return fmt.Errorf("phase %s, pod %q", g.Status.Phase, g.Status.PodUID)
		}
		return nil
	})
	r1 := restore(t, ns, "r1", "cold", vm.Name)
	var planned *vmv1.VirtualMachineRestore
	eventually(t, "r1 planned", func() error {
		if planned = get(t, r1); len(planned.Status.Claims) != 2 {
			return fmt.Errorf("status %+v", planned.Status)
		}
		return nil
	})
	rc := copier(t, ns, "r1-restore", node)
	newRoot, newData := planned.Status.Claims[0].ClaimName, planned.Status.Claims[1].ClaimName
	if err := argsHave(rc, "disk-copy", "--require-marker", "--copy=from=/virtpod/copy/cold-root/disk.img,to=/virtpod/copy/"+newRoot+"/disk.img"); err != nil {
		t.Error(err)
	}
	ends(t, rc, "")
	phase(t, r1, vmv1.SnapshotSucceeded, vmv1.ReasonReady, restorePhase)
	restored := get(t, vm)
	if restored.Spec.Guest.RootDisk.PersistentVolumeClaim.ClaimName != newRoot || restored.Spec.Guest.Disks[0].PersistentVolumeClaim.ClaimName != newData || restored.Spec.Guest.Disks[1].PersistentVolumeClaim.ClaimName != "web-ro" {
		t.Errorf("VM claims %v: want %s, %s and the read-only web-ro kept", restored.Spec.Guest.ClaimNames(), newRoot, newData)
	}
	eventually(t, "claims handed over", func() error {
		if c := get(t, claim(ns, "web-root")); !ownedBy(c, r1.UID) {
			return fmt.Errorf("the replaced claim web-root is not the restore's: %v", c.OwnerReferences)
		}
		if c := get(t, claim(ns, newRoot)); ownedBy(c, get(t, r1).UID) {
			return fmt.Errorf("the restored claim %s is still the restore's", newRoot)
		}
		return nil
	})

	// A new name clones: a new VM on claims of its own, with the source's spec.
	r2 := restore(t, ns, "r2", "cold", "web-copy")
	rc2 := copier(t, ns, "r2-restore", node)
	ends(t, rc2, "")
	phase(t, r2, vmv1.SnapshotSucceeded, vmv1.ReasonReady, restorePhase)
	clone := get(t, &vmv1.VirtualMachine{ObjectMeta: vm.ObjectMeta})
	clone.Name = "web-copy"
	clone = get(t, clone)
	if names := clone.Spec.Guest.ClaimNames(); len(names) != 3 || names[0] != "web-copy-root" || names[1] != "web-copy-data" || names[2] != "web-ro" || clone.Spec.Guest.Memory != vm.Spec.Guest.Memory {
		t.Errorf("clone claims %v, spec %+v", names, clone.Spec.Guest)
	}
	if !get(t, r2).Status.Clone {
		t.Error("r2's status does not say it cloned")
	}
}

func setStrategy(t *testing.T, vm *vmv1.VirtualMachine, s vmv1.RunStrategy) {
	t.Helper()
	cur := get(t, vm)
	next := cur.DeepCopy()
	next.Spec.RunStrategy = s
	if err := env.Client.Patch(ctx, next, client.MergeFrom(cur)); err != nil {
		t.Fatal(err)
	}
}
