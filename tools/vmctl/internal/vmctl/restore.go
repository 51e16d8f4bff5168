package vmctl

import (
	"fmt"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Restore and clone: VirtualMachineRestores, in place or into a new VM.

func (a *app) restoreCmd() *cobra.Command {
	var f waitFlags
	cmd := &cobra.Command{
		Use:   "restore VM SNAPSHOT",
		Short: "Put a snapshot's disks back into its stopped VM (a VirtualMachineRestore)",
		Long: `Restore creates a VirtualMachineRestore <VM>-restore-<UTC yyyymmdd-hhmmss> of SNAPSHOT onto VM, the
VM it was taken of. The controller copies each of the snapshot's disks into a new claim and
points the VM at the new claims; the claims they replace are kept, owned by the restore, and go
when the restore is deleted. The snapshot is untouched and can be restored again.

The VM must be stopped (runStrategy Halted, phase Stopped): vmctl refuses at once otherwise and
says how (vmctl stop VM). To make a new VM from a snapshot instead, use vmctl clone.

With --wait (the default) vmctl follows the restore and prints which claim replaced which, or
the reason it failed; start the VM afterwards with vmctl start VM.

Exit codes: 0 Succeeded (or created, with --wait=false), 1 failed (the VM or the snapshot is
missing, the VM is not stopped, the snapshot Failed or is another VM's, the API server refused,
the restore Failed: its reason and message on stderr), 2 wrong command line, 4 --timeout passed
before it ended (the controller goes on with it).`,
		Example: `  vmctl stop db
  vmctl restore db db-monday
  vmctl start db`,
		Args:              exactArgs(2),
		ValidArgsFunction: a.completeVMThenSnapshot,
		RunE: func(_ *cobra.Command, args []string) error {
			vmName, snapName := args[0], args[1]
			o, err := a.snapConnect()
			if err != nil {
				return err
			}
			snap, err := o.snapshot(snapName)
			if err != nil {
				return err
			}
			if snap.Spec.VMName != vmName {
				return fmt.Errorf("snapshot %s is of VM %s, not %s: restore it onto its own VM (vmctl restore %s %s), or make a new VM from it (vmctl clone %s NEWVM --snapshot %s)",
					o.ref(snapName), snap.Spec.VMName, vmName, snap.Spec.VMName, snapName, snap.Spec.VMName, snapName)
			}
			if err := usable(o, snap); err != nil {
				return err
			}
			vm, err := o.vm(vmName)
			if err != nil {
				return err
			}
			if vm == nil {
				return fmt.Errorf("VM %s, which snapshot %s was taken of, is gone: a restore puts the disks back into it; a clone copies its spec, so neither can be made", o.ref(vmName), snapName)
			}
			if !vm.StoppedForRestore() {
				return fmt.Errorf("VM %s is %s (runStrategy %s): a restore replaces the disks of a stopped VM only; stop it first: vmctl stop %s",
					o.ref(vmName), vm.Status.EffectivePhase(), vm.Spec.EffectiveRunStrategy(), vmName)
			}
			rs := &vmv1.VirtualMachineRestore{
				ObjectMeta: metav1.ObjectMeta{Name: vmName + "-restore-" + a.stamp(), Namespace: o.cn.ns},
				Spec:       vmv1.VirtualMachineRestoreSpec{SnapshotName: snapName, VMName: vmName},
			}
			if err := o.createRestore(rs, fmt.Sprintf("VM %s's disks are replaced by copies of snapshot %s's", vmName, snapName)); err != nil {
				return err
			}
			if !f.wait {
				return nil
			}
			if err := o.follow(rs, o.a.now().Add(f.timeout), f.timeout, restoreState(rs)); err != nil {
				return err
			}
			if err := o.reportRestore(rs); err != nil {
				return err
			}
			return o.say("vm", vmName, "names the restored claims; start it with `vmctl start %s`", vmName)
		},
	}
	f.add(cmd, "the restore Succeeded or Failed")
	return cmd
}

func (a *app) cloneCmd() *cobra.Command {
	var f waitFlags
	var snapName string
	cmd := &cobra.Command{
		Use:   "clone SOURCE NEWVM [--snapshot SNAPSHOT]",
		Short: "Make a new VM from a VM's disks: a snapshot of it, restored under a new name",
		Long: `Clone makes NEWVM, which must not exist, with SOURCE's spec and copies of its disks on claims of
its own (<NEWVM>-<disk>); its own UID gives it its own MAC address and cloud-init instance-id.

With --snapshot, the copies come from that snapshot of SOURCE (taken while it ran or not).
Without, SOURCE must be stopped: vmctl first takes a snapshot of it, <SOURCE>-<UTC
yyyymmdd-hhmmss>, waits for it, and then restores it as NEWVM. Either way the restore is a
VirtualMachineRestore <NEWVM>-clone-<UTC yyyymmdd-hhmmss>; vmctl prints both names. The snapshot
stays (it holds a copy of SOURCE's disks): delete it when you no longer need it. NEWVM gets
SOURCE's runStrategy: a clone of a stopped VM is Halted until vmctl start NEWVM.

With --wait=false, vmctl creates the snapshot and the restore at once and returns; the restore
starts when the snapshot has succeeded.

Exit codes: 0 NEWVM made (or asked for, with --wait=false), 1 failed (SOURCE or the snapshot is
missing, NEWVM exists, SOURCE is not stopped (without --snapshot), the snapshot or the restore
Failed: the reason on stderr), 2 wrong command line (NEWVM not a VM name), 4 --timeout passed
before both ended (the controller goes on with them).`,
		Example: `  vmctl clone web web-test
  vmctl clone db db-copy --snapshot db-monday
  vmctl clone web web-2 --wait=false`,
		Args:              exactArgs(2),
		ValidArgsFunction: a.completeVMs,
		RunE: func(_ *cobra.Command, args []string) error {
			src, name := args[0], args[1]
			if err := checkVMName(name); err != nil {
				return err
			}
			if name == src {
				return usageError{fmt.Errorf("NEWVM is SOURCE (%s): a clone needs a new name; to put a snapshot back into %s, use vmctl restore", src, src)}
			}
			o, err := a.snapConnect()
			if err != nil {
				return err
			}
			deadline := o.start.Add(f.timeout)
			if vm, err := o.vm(name); err != nil {
				return err
			} else if vm != nil {
				return fmt.Errorf("VM %s already exists: a clone makes a new VM; choose a name no VM has", o.ref(name))
			}
			vm, err := o.vm(src)
			if err != nil {
				return err
			}
			if vm == nil {
				return fmt.Errorf("VirtualMachine %q not found in namespace %q: a clone copies its spec; name a VM that exists (kubectl get vm -n %s)", src, o.cn.ns, o.cn.ns)
			}
			var snap *vmv1.VirtualMachineSnapshot
			if snapName != "" {
				if snap, err = o.snapshot(snapName); err != nil {
					return err
				}
				if snap.Spec.VMName != src {
					return fmt.Errorf("snapshot %s is of VM %s, not %s: vmctl clone %s %s --snapshot %s", o.ref(snapName), snap.Spec.VMName, src, snap.Spec.VMName, name, snapName)
				}
				if err := usable(o, snap); err != nil {
					return err
				}
			} else {
				if !vm.Stopped() {
					return fmt.Errorf("VM %s is %s: vmctl clone without --snapshot copies a stopped VM; stop it first: vmctl stop %s (or clone a snapshot of the running guest: vmctl snapshot %s, then vmctl clone %s %s --snapshot <its name>)",
						o.ref(src), vm.Status.EffectivePhase(), src, src, src, name)
				}
				snap = &vmv1.VirtualMachineSnapshot{
					ObjectMeta: metav1.ObjectMeta{Name: src + "-" + a.stamp(), Namespace: o.cn.ns},
					Spec:       vmv1.VirtualMachineSnapshotSpec{VMName: src},
				}
				if err := o.createSnapshot(snap, vm); err != nil {
					return err
				}
				if f.wait {
					if err := o.follow(snap, deadline, f.timeout, snapshotState(snap)); err != nil {
						return err
					}
					if err := o.reportSnapshot(snap); err != nil {
						return err
					}
				}
			}
			rs := &vmv1.VirtualMachineRestore{
				ObjectMeta: metav1.ObjectMeta{Name: name + "-clone-" + a.stamp(), Namespace: o.cn.ns},
				Spec:       vmv1.VirtualMachineRestoreSpec{SnapshotName: snap.Name, VMName: name},
			}
			if err := o.createRestore(rs, fmt.Sprintf("VM %s is made from snapshot %s of VM %s (a clone)", name, snap.Name, src)); err != nil {
				return err
			}
			if !f.wait {
				return nil
			}
			if err := o.follow(rs, deadline, f.timeout, restoreState(rs)); err != nil {
				return err
			}
			if err := o.reportRestore(rs); err != nil {
				return err
			}
			made, err := o.vm(name)
			if err == nil && made != nil {
				how := "it starts by itself"
				if made.Spec.Halted() {
					how = fmt.Sprintf("start it with `vmctl start %s`", name)
				}
				if err := o.say("vm", name, "made from snapshot %s of VM %s (runStrategy %s): %s", snap.Name, src, made.Spec.EffectiveRunStrategy(), how); err != nil {
					return err
				}
			}
			if snapName == "" {
				return o.say("snapshot", snap.Name, "is kept: it holds a copy of VM %s's disks; delete it once you no longer need it (kubectl delete vmsnap %s -n %s)", src, snap.Name, o.cn.ns)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&snapName, "snapshot", "", "clone this snapshot of SOURCE instead of taking one (SOURCE may then run)")
	f.add(cmd, "NEWVM is made (or the snapshot or the restore Failed)")
	return cmd
}

// checkVMName refuses, as a usage error, a name no VM could have.
func checkVMName(name string) error {
	if len(name) > maxVMName || !vmNameRE.MatchString(name) {
		return usageError{fmt.Errorf("NEWVM %q is not a VM name: give a DNS label of at most %d characters that starts with a letter, such as web-2", name, maxVMName)}
	}
	return nil
}

// usable refuses a snapshot that Failed; one not ended yet is fine: the restore waits for it.
func usable(o *snapOp, snap *vmv1.VirtualMachineSnapshot) error {
	switch snap.Status.Phase {
	case vmv1.SnapshotFailed:
		return fmt.Errorf("snapshot %s Failed (%s): it holds nothing to restore; take another (vmctl snapshot %s)", o.ref(snap.Name), readyWhy(snap.Status.Conditions), snap.Spec.VMName)
	case vmv1.SnapshotSucceeded:
		return nil
	}
	fmt.Fprintf(o.a.stderr, "note: snapshot %s is %s: the restore starts once it has Succeeded\n", o.ref(snap.Name), orNew(snap.Status.Phase))
	return nil
}

// snapOp is one snapshot verb's connection and start.
