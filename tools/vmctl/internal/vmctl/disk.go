package vmctl

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// The disk verbs (docs/hotplug.md): attach adds a hotpluggable disk to a VM's spec and, for a
// running guest, follows status.disks until the guest has it; detach takes one out of the spec
// and follows until the guest released it. A stopped VM gets the change at its next start.

// hotplugWait is --timeout's default: an attachment pod's image is the runner's, already on
// the node, so a minute is ample unless a claim waits to be provisioned.
const hotplugWait = 2 * time.Minute

func (a *app) diskCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "disk",
		Short: "Attach disks to a running VM and detach them, without a restart",
	}
	cmd.AddCommand(a.diskAttachCmd(), a.diskDetachCmd())
	return cmd
}

// diskSource is attach's flags: exactly one source.
type diskSource struct {
	claim, configMap, secret, empty string
	readOnly                        bool
}

func (s diskSource) disk(name string) (vmv1.Disk, error) {
	d := vmv1.Disk{Name: name, Hotplug: true}
	n := 0
	if s.claim != "" {
		d.PersistentVolumeClaim, n = &vmv1.ClaimDiskSource{ClaimName: s.claim, ReadOnly: s.readOnly}, n+1
	}
	if s.configMap != "" {
		d.ConfigMap, n = &vmv1.ConfigMapDiskSource{Name: s.configMap}, n+1
	}
	if s.secret != "" {
		d.Secret, n = &vmv1.SecretDiskSource{SecretName: s.secret}, n+1
	}
	if s.empty != "" {
		q, err := resource.ParseQuantity(s.empty)
		if err != nil {
			return d, usageError{fmt.Errorf("--empty %q: want a size such as 1Gi", s.empty)}
		}
		d.EmptyDisk, n = &vmv1.EmptyDiskSource{Size: q}, n+1
	}
	if n != 1 {
		return d, usageError{errors.New("give exactly one of --claim, --empty, --configmap and --secret")}
	}
	if s.readOnly && d.PersistentVolumeClaim == nil {
		return d, usageError{errors.New("--read-only is for --claim (ConfigMap and Secret disks are read-only, an empty disk is written)")}
	}
	return d, nil
}

func (a *app) diskAttachCmd() *cobra.Command {
	var src diskSource
	var f waitFlags
	cmd := &cobra.Command{
		Use:   "attach VM DISK",
		Short: "Add a hotpluggable disk to a VM; a running guest gets it now",
		Long: `Attach adds disk DISK (its name, which the guest sees as the disk's serial) to the VM's
spec.guest.disks with hotplug: true. A running guest gets it at once: an attachment pod on the
guest's node serves it, and the guest sees a new virtio disk. A stopped VM gets it at its next
start. vmctl follows status.disks until the guest has the disk and says on which slot.

Exit codes: 0 attached (or added, with --wait=false or a stopped VM), 1 failed (the VM is missing,
the API server refused the change: its message names the field), 2 wrong command line, 4
--timeout passed first (the controller goes on; vmctl status shows why it waits).`,
		Example: `  vmctl disk attach db logs --claim db-logs
  vmctl disk attach db scratch --empty 10Gi
  vmctl disk attach db config --configmap db-config`,
		Args:              exactArgs(2),
		ValidArgsFunction: a.completeVMs,
		RunE: func(_ *cobra.Command, args []string) error {
			d, err := src.disk(args[1])
			if err != nil {
				return err
			}
			return a.changeDisks(args[0], d.Name, f, func(disks []vmv1.Disk) ([]vmv1.Disk, error) {
				if slices.ContainsFunc(disks, func(o vmv1.Disk) bool { return o.Name == d.Name }) {
					return nil, fmt.Errorf("the VM has a disk %s already: detach it first, or choose another name", d.Name)
				}
				return append(disks, d), nil
			})
		},
	}
	cmd.Flags().StringVar(&src.claim, "claim", "", "a PersistentVolumeClaim in the VM's namespace")
	cmd.Flags().BoolVar(&src.readOnly, "read-only", false, "attach the claim read-only")
	cmd.Flags().StringVar(&src.empty, "empty", "", "a blank disk of this size (it lives as long as the runner pod)")
	cmd.Flags().StringVar(&src.configMap, "configmap", "", "a ConfigMap's keys as files on a read-only disk")
	cmd.Flags().StringVar(&src.secret, "secret", "", "a Secret's keys as files on a read-only disk")
	f.add(cmd, "the guest has the disk")
	f.timeout = hotplugWait
	cmd.Flags().Lookup("timeout").DefValue = hotplugWait.String()
	return cmd
}

func (a *app) diskDetachCmd() *cobra.Command {
	var f waitFlags
	cmd := &cobra.Command{
		Use:   "detach VM DISK",
		Short: "Take a hotpluggable disk out of a VM; a running guest releases it now",
		Long: `Detach removes disk DISK from the VM's spec.guest.disks. A running guest is asked to
release it (as a PCIe device's removal) and the disk leaves once it did: what the guest wrote
and was told is written is on the disk. vmctl follows status.disks until then. Only a disk with
hotplug: true leaves a running guest; another one is refused (it would leave at the next start).

Exit codes: 0 detached, 1 failed, 2 wrong command line, 3 refused (the disk is not hotpluggable),
4 --timeout passed first (the guest has not released it: is it mounted? vmctl status says).`,
		Example:           `  vmctl disk detach db logs`,
		Args:              exactArgs(2),
		ValidArgsFunction: a.completeVMs,
		RunE: func(_ *cobra.Command, args []string) error {
			return a.changeDisks(args[0], args[1], f, func(disks []vmv1.Disk) ([]vmv1.Disk, error) {
				i := slices.IndexFunc(disks, func(o vmv1.Disk) bool { return o.Name == args[1] })
				switch {
				case i < 0:
					return nil, fmt.Errorf("the VM has no disk %s", args[1])
				case !disks[i].Hotplug:
					fmt.Fprintf(a.stderr, "error: disk %s is not hotpluggable (hotplug: true): it can only leave at the next start; remove it from spec.guest.disks and restart the VM\n", args[1])
					return nil, exitError{code: exitRefused}
				}
				return slices.Delete(slices.Clone(disks), i, i+1), nil
			})
		},
	}
	f.add(cmd, "the guest released the disk")
	f.timeout = hotplugWait
	cmd.Flags().Lookup("timeout").DefValue = hotplugWait.String()
	return cmd
}

// changeDisks applies change to the VM's disks, guarded by the resourceVersion it read, then,
// for a running guest, waits until status.disks shows the disk attached (it is in the spec) or
// gone (it is not).
func (a *app) changeDisks(vmName, disk string, f waitFlags, change func([]vmv1.Disk) ([]vmv1.Disk, error)) error {
	p, err := a.power(vmName)
	if err != nil {
		return err
	}
	next := p.vm.DeepCopy()
	if next.Spec.Guest.Disks, err = change(next.Spec.Guest.Disks); err != nil {
		return err
	}
	ctx, cancel := a.ctx()
	defer cancel()
	if err := p.c.Patch(ctx, next, client.MergeFromWithOptions(p.vm, client.MergeFromWithOptimisticLock{}), client.FieldOwner(fieldManager)); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("VirtualMachine %s changed while vmctl changed it: run the command again", p)
		}
		return apiError("virtualmachines", "patching VirtualMachine "+p.String(), err)
	}
	attach := slices.ContainsFunc(next.Spec.Guest.Disks, func(d vmv1.Disk) bool { return d.Name == disk })
	verb := map[bool]string{true: "attached", false: "detached"}[attach]
	if p.vm.Status.Phase != vmv1.PhaseRunning || !f.wait {
		return p.say("disk %s: spec changed; a running guest gets it at once, a stopped one at its next start", disk)
	}
	vm, err := p.awaitDisk(f.timeout, disk, attach)
	if err != nil {
		return err
	}
	if !attach {
		return p.say("disk %s %s after %s: the guest released it", disk, verb, p.since())
	}
	i := slices.IndexFunc(vm.Status.Disks, func(d vmv1.HotplugDiskStatus) bool { return d.Name == disk })
	d := vm.Status.Disks[i]
	return p.say("disk %s %s after %s on slot %d%s", disk, verb, p.since(), d.Slot, servedBy(d))
}

// awaitDisk waits until the guest has disk (attach) or has let it go.
func (p *powerOp) awaitDisk(timeout time.Duration, disk string, attach bool) (*vmv1.VirtualMachine, error) {
	var last string
	vm, err := p.await(timeout, vmv1.PhaseRunning, func(vm *vmv1.VirtualMachine) bool {
		i := slices.IndexFunc(vm.Status.Disks, func(d vmv1.HotplugDiskStatus) bool { return d.Name == disk })
		if i >= 0 {
			last = fmt.Sprintf("%s: %s", vm.Status.Disks[i].State, vm.Status.Disks[i].Message)
		}
		if attach {
			return i >= 0 && vm.Status.Disks[i].State == vmv1.DiskAttached
		}
		return i < 0
	})
	if err != nil && last != "" {
		fmt.Fprintf(p.a.stderr, "disk %s was last %s\n", disk, last)
	}
	return vm, err
}

func servedBy(d vmv1.HotplugDiskStatus) string {
	if d.AttachmentPod == "" {
		return " (held by the runner pod)"
	}
	return " (served by attachment pod " + d.AttachmentPod + ")"
}
