package vmctl

import (
	"fmt"
	"io"
	"regexp"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// The snapshot verbs (docs/snapshots.md): snapshot and snapshots make and list
// VirtualMachineSnapshots; restore and clone make VirtualMachineRestores; each follows, with
// --wait, the object's status until the controller has ended it, and says how. export copies a
// Succeeded snapshot's disk to a local file through a short-lived pod.

const (
	// stampLayout is the UTC time in the names vmctl makes: web-20260102-150405.
	stampLayout = "20060102-150405"
	// snapshotWait is --wait's default --timeout: the controller's own default deadline
	// (spec.deadlineSeconds, 600 s).
	snapshotWait = 10 * time.Minute
	// maxVMName is a VirtualMachine name's longest (its CRD's and the restore's spec.vmName's).
	maxVMName = 56
)

// vmNameRE is what the CRDs accept as a VM's name: a DNS label that starts with a letter.
var vmNameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// waitFlags are --wait and --timeout of the snapshot verbs.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func (f *waitFlags) add(cmd *cobra.Command, until string) {
	cmd.Flags().BoolVar(&f.wait, "wait", true, "wait until "+until+" and say how it ended")
	cmd.Flags().DurationVar(&f.timeout, "timeout", snapshotWait, "how long --wait waits (exit code 4 when it gives up; the controller goes on)")
}

// rangeArgs is cobra.RangeArgs whose complaint is a usage error.
func rangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.RangeArgs(lo, hi)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func (a *app) snapshotCmd() *cobra.Command {
	var f waitFlags
	var full bool
	var class string
	var deadline time.Duration
	cmd := &cobra.Command{
		Use:   "snapshot VM [NAME]",
		Short: "Copy a VM's disks into a VirtualMachineSnapshot, from its running guest or while it is stopped",
		Long: `Snapshot creates a VirtualMachineSnapshot NAME (default <VM>-<UTC yyyymmdd-hhmmss>) of the VM's
writable disks on claims. The controller copies them into claims of the snapshot's own: from a
running guest at one instant without stopping it (GuestFrozen when a guest agent froze its file
systems, else CrashConsistent), and only the blocks written since the VM's last snapshot of the
same run (incremental) unless --full; from a stopped VM as its guest left them (Offline). A VM
that is starting, stopping or suspended keeps the snapshot Pending until it runs or is stopped.

With --wait (the default) vmctl follows the snapshot and prints how it ended: its consistency,
each disk's bytes read of its size and its claim, the snapshot it was built on; or the reason
it failed. List snapshots with vmctl snapshots, restore one with vmctl restore, clone with
vmctl clone, copy a disk out with vmctl export.

Exit codes: 0 Succeeded (or created, with --wait=false), 1 failed (the VM is missing, the API
server refused, the snapshot Failed: its reason and message on stderr), 2 wrong command line,
4 --timeout passed before it ended (the controller goes on with it).`,
		Example: `  vmctl snapshot db
  vmctl snapshot db db-monday --full
  vmctl snapshot db --storage-class fast-ssd --wait=false`,
		Args:              rangeArgs(1, 2),
		ValidArgsFunction: a.completeVMs,
		RunE: func(_ *cobra.Command, args []string) error {
			secs, err := deadlineSeconds(deadline)
			if err != nil {
				return err
			}
			o, err := a.snapConnect()
			if err != nil {
				return err
			}
			vm, err := o.vm(args[0])
			if err != nil {
				return err
			}
			if vm == nil {
				return fmt.Errorf("VirtualMachine %q not found in namespace %q: name a VM that exists (kubectl get vm -n %s)", args[0], o.cn.ns, o.cn.ns)
			}
			name := vm.Name + "-" + a.stamp()
			if len(args) == 2 {
				name = args[1]
			}
			snap := &vmv1.VirtualMachineSnapshot{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: o.cn.ns},
				Spec:       vmv1.VirtualMachineSnapshotSpec{VMName: vm.Name, StorageClassName: class, Full: full, DeadlineSeconds: secs},
			}
			if err := o.createSnapshot(snap, vm); err != nil {
				return err
			}
			if !f.wait {
				return nil
			}
			if err := o.follow(snap, o.a.now().Add(f.timeout), f.timeout, snapshotState(snap)); err != nil {
				return err
			}
			return o.reportSnapshot(snap)
		},
	}
	cmd.Flags().BoolVar(&full, "full", false, "copy every disk whole, even when only the blocks written since the VM's last snapshot could be copied")
	cmd.Flags().StringVar(&class, "storage-class", "", "the StorageClass of the snapshot's claims (default: each disk's own claim's)")
	cmd.Flags().DurationVar(&deadline, "deadline", 0, "spec.deadlineSeconds: past it the controller stops the copy and fails the snapshot (10s to 24h; default the API's 10m)")
	f.add(cmd, "the snapshot Succeeded or Failed")
	return cmd
}

// deadlineSeconds is --deadline as spec.deadlineSeconds (0: the API's default).
func deadlineSeconds(d time.Duration) (int64, error) {
	if d == 0 {
		return 0, nil
	}
	if d < 10*time.Second || d > 24*time.Hour {
		return 0, usageError{fmt.Errorf("--deadline %s: give 10s to 24h", d)}
	}
	return int64(d.Round(time.Second) / time.Second), nil
}

func (a *app) snapshotsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "snapshots [VM]",
		Short: "List the namespace's VirtualMachineSnapshots, or one VM's",
		Long: `List the VirtualMachineSnapshots in the namespace (of VM only, when given), oldest first: each one's
VM, phase, consistency, the snapshot it was built on (BASE, for an incremental one), the size
of its disks, the bytes read from the guest for them (COPIED; - for a copy of a stopped VM's
disks, which are copied whole), its age, and why it is not ready (REASON) while it is not.

Exit codes: 0 listed (none is not an error), 1 failed (the API server refused), 2 wrong command
line.`,
		Example:           "  vmctl snapshots\n  vmctl snapshots db\n  vmctl -n prod snapshots",
		Args:              maxArgs(1),
		ValidArgsFunction: a.completeVMs,
		RunE: func(_ *cobra.Command, args []string) error {
			cn, err := a.connect()
			if err != nil {
				return err
			}
			ctx, cancel := a.ctx()
			defer cancel()
			list := &vmv1.VirtualMachineSnapshotList{}
			if err := cn.c.List(ctx, list, client.InNamespace(cn.ns)); err != nil {
				return apiError("virtualmachinesnapshots", "listing VirtualMachineSnapshots in namespace "+cn.ns, err)
			}
			var snaps []vmv1.VirtualMachineSnapshot
			for _, s := range list.Items {
				if len(args) == 0 || s.Spec.VMName == args[0] {
					snaps = append(snaps, s)
				}
			}
			if len(snaps) == 0 {
				of := ""
				if len(args) == 1 {
					of = " of VM " + args[0]
				}
				fmt.Fprintf(a.stderr, "No snapshots%s in namespace %s.\n", of, cn.ns)
				return nil
			}
			return renderSnapshots(a.stdout, snaps, a.now())
		},
	}
}

// renderSnapshots writes the snapshots as a table, oldest first.
func renderSnapshots(w io.Writer, snaps []vmv1.VirtualMachineSnapshot, now time.Time) error {
	sort.SliceStable(snaps, func(i, j int) bool {
		ti, tj := snaps[i].CreationTimestamp, snaps[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return snaps[i].Name < snaps[j].Name
	})
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVM\tPHASE\tCONSISTENCY\tBASE\tSIZE\tCOPIED\tAGE\tREASON")
	for i := range snaps {
		s := &snaps[i]
		var size, copied int64
		for _, d := range s.Status.Disks {
			size += d.SizeBytes
			copied += d.CopiedBytes
		}
		sizeCell, copiedCell := "-", "-"
		if len(s.Status.Disks) > 0 {
			sizeCell = bytesIEC(float64(size))
		}
		if s.Status.Phase == vmv1.SnapshotSucceeded && s.Status.Consistency != vmv1.ConsistencyOffline {
			copiedCell = bytesIEC(float64(copied))
		}
		reason := "-"
		if c := meta.FindStatusCondition(s.Status.Conditions, vmv1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
			reason = c.Reason
		}
		age := "-"
		if !s.CreationTimestamp.IsZero() {
			age = duration.HumanDuration(now.Sub(s.CreationTimestamp.Time))
		}
		phase := string(s.Status.Phase)
		if phase == "" {
			phase = "New"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Spec.VMName, phase, orDash(string(s.Status.Consistency)),
			orDash(s.Status.Base), sizeCell, copiedCell, age, reason)
	}
	return tw.Flush()
}
