package vmctl

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

type snapOp struct {
	a     *app
	cn    *conn
	start time.Time
}

func (a *app) snapConnect() (*snapOp, error) {
	start := a.now()
	cn, err := a.connect()
	if err != nil {
		return nil, err
	}
	return &snapOp{a: a, cn: cn, start: start}, nil
}

func (a *app) stamp() string { return a.now().UTC().Format(stampLayout) }

// ref is namespace/name.
func (o *snapOp) ref(name string) string { return o.cn.ns + "/" + name }

// say writes "KIND NAMESPACE/NAME what" on stdout.
func (o *snapOp) say(kind, name, format string, args ...any) error {
	_, err := fmt.Fprintf(o.a.stdout, "%s %s %s\n", kind, o.ref(name), fmt.Sprintf(format, args...))
	return err
}

func (o *snapOp) since() time.Duration { return o.a.now().Sub(o.start).Round(time.Second) }

// vm reads a VM; nil when there is none.
func (o *snapOp) vm(name string) (*vmv1.VirtualMachine, error) {
	ctx, cancel := o.a.ctx()
	defer cancel()
	vm := &vmv1.VirtualMachine{}
	err := o.cn.c.Get(ctx, client.ObjectKey{Namespace: o.cn.ns, Name: name}, vm)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, apiError("virtualmachines", "getting VirtualMachine "+o.ref(name), err)
	}
	return vm, nil
}

// snapshot reads a snapshot; a missing one is a one-line error.
func (o *snapOp) snapshot(name string) (*vmv1.VirtualMachineSnapshot, error) {
	ctx, cancel := o.a.ctx()
	defer cancel()
	s := &vmv1.VirtualMachineSnapshot{}
	err := o.cn.c.Get(ctx, client.ObjectKey{Namespace: o.cn.ns, Name: name}, s)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("VirtualMachineSnapshot %q not found in namespace %q: list them with vmctl snapshots", name, o.cn.ns)
	case err != nil:
		return nil, apiError("virtualmachinesnapshots", "getting VirtualMachineSnapshot "+o.ref(name), err)
	}
	return s, nil
}

// createSnapshot creates snap of vm and says what it copies.
func (o *snapOp) createSnapshot(snap *vmv1.VirtualMachineSnapshot, vm *vmv1.VirtualMachine) error {
	ctx, cancel := o.a.ctx()
	defer cancel()
	if err := o.cn.c.Create(ctx, snap, client.FieldOwner(fieldManager)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("VirtualMachineSnapshot %s already exists: give another name (vmctl snapshot %s NAME)", o.ref(snap.Name), snap.Spec.VMName)
		}
		return apiError("virtualmachinesnapshots", "creating VirtualMachineSnapshot "+o.ref(snap.Name), err)
	}
	how := "incremental when the VM's last snapshot allows"
	switch {
	case snap.Spec.Full:
		how = "full copy"
	case vm.Stopped():
		how = "the stopped VM's disks, copied whole"
	}
	if snap.Spec.StorageClassName != "" {
		how += ", claims of class " + snap.Spec.StorageClassName
	}
	return o.say("snapshot", snap.Name, "of VM %s created (%s)", snap.Spec.VMName, how)
}

func (o *snapOp) createRestore(rs *vmv1.VirtualMachineRestore, what string) error {
	ctx, cancel := o.a.ctx()
	defer cancel()
	if err := o.cn.c.Create(ctx, rs, client.FieldOwner(fieldManager)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("VirtualMachineRestore %s already exists: try again in a second", o.ref(rs.Name))
		}
		return apiError("virtualmachinerestores", "creating VirtualMachineRestore "+o.ref(rs.Name), err)
	}
	return o.say("restore", rs.Name, "created: %s", what)
}

// objState is where a snapshot or a restore stands: its kind as vmctl names it, its phase and its
// Ready condition.
type objState func() (kind string, phase vmv1.SnapshotPhase, ready *metav1.Condition)

func snapshotState(s *vmv1.VirtualMachineSnapshot) objState {
	return func() (string, vmv1.SnapshotPhase, *metav1.Condition) {
		return "snapshot", s.Status.Phase, meta.FindStatusCondition(s.Status.Conditions, vmv1.ConditionReady)
	}
}

func restoreState(rs *vmv1.VirtualMachineRestore) objState {
	return func() (string, vmv1.SnapshotPhase, *metav1.Condition) {
		return "restore", rs.Status.Phase, meta.FindStatusCondition(rs.Status.Conditions, vmv1.ConditionReady)
	}
}

// follow reads obj until the controller has ended it (Succeeded or Failed), saying each new
// phase and reason on the way; past deadline it says where it stands and exits 4.
func (o *snapOp) follow(obj client.Object, deadline time.Time, timeout time.Duration, state objState) error {
	key := client.ObjectKeyFromObject(obj)
	last := ""
	for {
		ctx, cancel := o.a.ctx()
		err := o.cn.c.Get(ctx, key, obj)
		cancel()
		kind, phase, ready := state()
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%s %s was deleted", kind, o.ref(key.Name))
		case err != nil:
			return fmt.Errorf("reading %s %s: %w", kind, o.ref(key.Name), err)
		case phase == vmv1.SnapshotSucceeded || phase == vmv1.SnapshotFailed:
			return nil
		}
		now := stateLine(phase, ready)
		if phase != "" && now != last {
			if err := o.say(kind, key.Name, "%s", now); err != nil {
				return err
			}
			last = now
		}
		if !o.a.now().Before(deadline) {
			fmt.Fprintf(o.a.stderr, "error: %s %s has not ended after %s: it is %s; the controller goes on with it\n", kind, o.ref(key.Name), timeout, stateLine(phase, ready))
			return exitError{code: exitTimedOut}
		}
		time.Sleep(pollEvery)
	}
}

// stateLine is "Phase: message", or "Phase (Reason): message" when the reason says more.
func stateLine(phase vmv1.SnapshotPhase, ready *metav1.Condition) string {
	s := string(orNew(phase))
	if ready == nil {
		return s + " (no status yet)"
	}
	if ready.Reason != "" && ready.Reason != string(phase) {
		s += " (" + ready.Reason + ")"
	}
	if ready.Message != "" {
		s += ": " + ready.Message
	}
	return s
}

func orNew(p vmv1.SnapshotPhase) vmv1.SnapshotPhase {
	if p == "" {
		return "New"
	}
	return p
}

// readyWhy is the Ready condition's "Reason: message".
func readyWhy(conds []metav1.Condition) string {
	c := meta.FindStatusCondition(conds, vmv1.ConditionReady)
	if c == nil {
		return "no reason given"
	}
	if c.Message == "" {
		return c.Reason
	}
	return c.Reason + ": " + c.Message
}

// reportSnapshot says how an ended snapshot ended; Failed is exit 1.
func (o *snapOp) reportSnapshot(s *vmv1.VirtualMachineSnapshot) error {
	if s.Status.Phase != vmv1.SnapshotSucceeded {
		fmt.Fprintf(o.a.stderr, "error: snapshot %s Failed after %s: %s\n", o.ref(s.Name), o.since(), readyWhy(s.Status.Conditions))
		return exitError{code: exitFailed}
	}
	how := "a full copy"
	if s.Status.Base != "" {
		how = "incremental on snapshot " + s.Status.Base + " (only the blocks written since it were read)"
	}
	if err := o.say("snapshot", s.Name, "Succeeded after %s: %s, %s", o.since(), consistencyWords(s.Status.Consistency), how); err != nil {
		return err
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, vmv1.ConditionReady); c != nil {
		if _, why, ok := strings.Cut(c.Message, "; not frozen: "); ok {
			fmt.Fprintf(o.a.stdout, "  not frozen: %s\n", why)
		}
	}
	tw := tabwriter.NewWriter(o.a.stdout, 0, 4, 2, ' ', 0)
	for _, d := range s.Status.Disks {
		copied := fmt.Sprintf("%s read of %s", bytesIEC(float64(d.CopiedBytes)), bytesIEC(float64(d.SizeBytes)))
		if s.Status.Consistency == vmv1.ConsistencyOffline && d.CopiedBytes == 0 {
			copied = fmt.Sprintf("%s, copied whole from claim %s", bytesIEC(float64(d.SizeBytes)), d.SourceClaim)
		}
		fmt.Fprintf(tw, "  disk %s:\t%s\ton claim %s\n", d.Disk, copied, d.ClaimName)
	}
	return tw.Flush()
}

func consistencyWords(c vmv1.Consistency) string {
	switch c {
	case vmv1.ConsistencyGuestFrozen:
		return "GuestFrozen (the guest agent froze its file systems for the instant)"
	case vmv1.ConsistencyCrashConsistent:
		return "CrashConsistent (every disk at one instant, as after a power cut)"
	case vmv1.ConsistencyOffline:
		return "Offline (the VM was stopped)"
	case "":
		return "consistency not recorded"
	}
	return string(c)
}

// reportRestore says how an ended restore ended; Failed is exit 1.
func (o *snapOp) reportRestore(rs *vmv1.VirtualMachineRestore) error {
	if rs.Status.Phase != vmv1.SnapshotSucceeded {
		fmt.Fprintf(o.a.stderr, "error: restore %s Failed after %s: %s\n", o.ref(rs.Name), o.since(), readyWhy(rs.Status.Conditions))
		return exitError{code: exitFailed}
	}
	what := "VM " + rs.Spec.VMName + " names the restored claims"
	if rs.Status.Clone {
		what = fmt.Sprintf("VM %s was made from snapshot %s on claims of its own", rs.Spec.VMName, rs.Spec.SnapshotName)
	}
	if err := o.say("restore", rs.Name, "Succeeded after %s: %s", o.since(), what); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(o.a.stdout, 0, 4, 2, ' ', 0)
	for _, c := range rs.Status.Claims {
		line := fmt.Sprintf("  disk %s:\tclaim %s\t(a copy of snapshot claim %s)", c.Disk, c.ClaimName, c.From)
		if c.Replaced != "" {
			line += fmt.Sprintf("\treplaces claim %s, kept until restore %s is deleted", c.Replaced, rs.Name)
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// completeVMThenSnapshot completes restore's VM, then a snapshot of it.
func (a *app) completeVMThenSnapshot(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	switch len(args) {
	case 0:
		return a.completeVMs(cmd, args, prefix)
	case 1:
		return a.completeSnapshots(args[0])(cmd, nil, prefix)
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// completeSnapshots completes the first argument with a snapshot's name (of vm, if not "").
func (a *app) completeSnapshots(vm string) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return a.complete(prefix, func(ctx context.Context, cn *conn) ([]string, error) {
			list := &vmv1.VirtualMachineSnapshotList{}
			err := cn.c.List(ctx, list, client.InNamespace(cn.ns))
			var names []string
			for _, s := range list.Items {
				if vm == "" || s.Spec.VMName == vm {
					names = append(names, s.Name)
				}
			}
			return names, err
		})
	}
}
