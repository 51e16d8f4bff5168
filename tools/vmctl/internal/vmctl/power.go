package vmctl

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// The power verbs: stop, start and restart change the VM's spec (runStrategy, runRequestedAt)
// by a JSON merge patch under field manager vmctl, which the controller's events name; the
// controller does the rest. With --wait they follow the VM's status until it gets there.

// fieldManager is the field manager vmctl's patches are made under.
const fieldManager = "vmctl"

// Exit codes of the power verbs beyond 0 (done), 1 (failed) and 2 (wrong command line).
const (
	exitRefused  = 3 // the VM's state does not allow the verb: restart of a Halted VM
	exitTimedOut = 4 // --wait gave up after --timeout; the request stands
)

// pollEvery is how often --wait reads the VM.
const pollEvery = 500 * time.Millisecond

// powerFlags are the flags every power verb has.
type powerFlags struct {
	wait    bool
	timeout time.Duration
}

func (f *powerFlags) add(cmd *cobra.Command, until string) {
	cmd.Flags().BoolVar(&f.wait, "wait", true, "wait until the VM is "+until+" and say so")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 5*time.Minute, "how long --wait waits (exit code 4 when it gives up; the request stands)")
}

// powerArgs wants exactly one VM name; a wrong command line exits 2, as elsewhere in vmctl.
func (a *app) powerArgs(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		fmt.Fprintf(a.stderr, "error: %s takes one VM name, got %d\nSee '%s --help'.\n", cmd.Name(), len(args), cmd.CommandPath())
		return exitError{code: 2}
	}
	return nil
}

func (a *app) stopCmd() *cobra.Command {
	var f powerFlags
	var force bool
	cmd := &cobra.Command{
		Use:   "stop VM",
		Short: "Power a VM's guest down and keep it off (runStrategy Halted)",
		Long: `Stop sets the VM's spec.runStrategy to Halted. The controller deletes the runner pod with
its grace period, which the runner spends on the guest's ACPI power-down (spec.
terminationGracePeriodSeconds); the VM goes Stopping, then Stopped once the pod is gone. The VM,
its spec and its disks' images stay; nothing restarts it, also across controller restarts, until
vmctl start.

--force also deletes the runner pod at once, with grace period 0, as your own user (you need
pods/delete in the VM's namespace): the guest gets no clean shutdown, and Kubernetes frees the pod
name while the node may still be stopping it.

Exit codes: 0 stopped (or asked, with --wait=false), 1 failed (the VM is missing, the API server
refused), 2 wrong command line, 4 --timeout passed before the VM was Stopped.`,
		Example: `  vmctl stop web
  vmctl stop web --force
  vmctl stop web --wait=false`,
		Args: a.powerArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			p, err := a.power(args[0])
			if err != nil {
				return err
			}
			if p.vm.Spec.Halted() && p.vm.Status.Phase == vmv1.PhaseStopped && !force {
				return p.say("is already stopped (runStrategy Halted)")
			}
			if err := p.patch(map[string]any{"runStrategy": vmv1.RunHalted}); err != nil {
				return err
			}
			if err := p.say("runStrategy Halted: the guest powers down (grace period %ds)", grace(p.vm)); err != nil {
				return err
			}
			if force {
				if err := p.forceDelete(); err != nil {
					return err
				}
			}
			if !f.wait {
				return nil
			}
			vm, err := p.await(f.timeout, vmv1.PhaseStopped, func(vm *vmv1.VirtualMachine) bool { return vm.Status.Phase == vmv1.PhaseStopped })
			if err != nil {
				return err
			}
			how := ""
			if t := vm.Status.LastTermination; t != nil && t.Message != "" && !t.FinishedAt.Before(&metav1.Time{Time: p.start.Truncate(time.Second)}) {
				how = ": " + t.Message
			}
			return p.say("Stopped after %s%s", p.since(), how)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "also delete the runner pod at once (grace period 0): no clean guest shutdown")
	f.add(cmd, "Stopped")
	return cmd
}

func (a *app) startCmd() *cobra.Command {
	var f powerFlags
	strategy := string(vmv1.RunAlways)
	cmd := &cobra.Command{
		Use:   "start VM",
		Short: "Start a stopped VM, or a new run of one whose run ended",
		Long: `Start a VM that is Halted by setting spec.runStrategy to --strategy (default Always). A VM whose
run ended and stays ended (phase Succeeded or Failed under RerunOnFailure, Once or Manual) gets
a new run: spec.runRequestedAt is set to now. A VM already running, or on its way, is left alone.

Exit codes: 0 running (or asked, with --wait=false, or already running), 1 failed (the VM is
missing, the API server refused, the new run failed), 2 wrong command line, 4 --timeout passed
before the VM was Running.`,
		Example: `  vmctl start web
  vmctl start web --strategy Manual
  vmctl start web --wait=false`,
		Args: a.powerArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			next := vmv1.RunStrategy(strategy)
			switch next {
			case vmv1.RunAlways, vmv1.RunRerunOnFailure, vmv1.RunOnce, vmv1.RunManual:
			default:
				fmt.Fprintf(a.stderr, "error: --strategy must be Always, RerunOnFailure, Once or Manual, not %q\n", strategy)
				return exitError{code: 2}
			}
			p, err := a.power(args[0])
			if err != nil {
				return err
			}
			was := p.vm.Status.PodUID
			switch {
			case p.vm.Spec.Halted():
				if err := p.patch(map[string]any{"runStrategy": next}); err != nil {
					return err
				}
				if err := p.say("runStrategy %s: starting", next); err != nil {
					return err
				}
			case p.ended():
				if cmd.Flags().Changed("strategy") {
					fmt.Fprintf(a.stderr, "note: --strategy applies to a Halted VM; runStrategy stays %s\n", p.vm.Spec.EffectiveRunStrategy())
				}
				at, err := p.request()
				if err != nil {
					return err
				}
				if err := p.say("its run ended (%s): a new run asked for at %s", p.vm.Status.Phase, at); err != nil {
					return err
				}
			default:
				return p.say("is already running or on its way (phase %s, runStrategy %s)", p.vm.Status.EffectivePhase(), p.vm.Spec.EffectiveRunStrategy())
			}
			if !f.wait {
				return nil
			}
			return p.awaitRunning(f.timeout, was)
		},
	}
	cmd.Flags().StringVar(&strategy, "strategy", strategy, "the run strategy a Halted VM starts with: Always, RerunOnFailure, Once or Manual")
	f.add(cmd, "Running")
	return cmd
}

func (a *app) restartCmd() *cobra.Command {
	var f powerFlags
	cmd := &cobra.Command{
		Use:   "restart VM",
		Short: "Reboot a VM's guest cleanly into a new runner pod",
		Long: `Restart sets spec.runRequestedAt to now. The controller powers the guest down through the runner
pod's grace period (as stop does) and boots it in a new pod; an ended run gets a new one. The VM's
status counts it in userRestartCount, apart from crash restarts (restartCount), and with no
back-off. A Halted VM is not restarted: start it.

Exit codes: 0 running in a new pod (or asked, with --wait=false), 1 failed (the VM is missing, the
API server refused, the new run failed), 2 wrong command line, 3 the VM is Halted, 4 --timeout
passed before the VM was Running in a new pod.`,
		Example: `  vmctl restart web
  vmctl restart web --timeout 10m`,
		Args: a.powerArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			p, err := a.power(args[0])
			if err != nil {
				return err
			}
			if p.vm.Spec.Halted() {
				fmt.Fprintf(a.stderr, "error: VM %s is Halted (runStrategy Halted), so there is nothing to restart; start it with `vmctl start %s`\n", p, p.vm.Name)
				return exitError{code: exitRefused}
			}
			was := p.vm.Status.PodUID
			at, err := p.request()
			if err != nil {
				return err
			}
			if err := p.say("restart asked for at %s", at); err != nil {
				return err
			}
			if !f.wait {
				return nil
			}
			return p.awaitRunning(f.timeout, was)
		},
	}
	f.add(cmd, "Running in a new runner pod")
	return cmd
}

// powerOp is one power verb's VM and connection.
type powerOp struct {
	a     *app
	c     client.Client
	vm    *vmv1.VirtualMachine
	start time.Time
}

func (p *powerOp) String() string { return p.vm.Namespace + "/" + p.vm.Name }

// power reads the VM the verb acts on; a missing one is a one-line error.
func (a *app) power(name string) (*powerOp, error) {
	start := a.now()
	cn, err := a.connect()
	if err != nil {
		return nil, err
	}
	ctx, cancel := a.ctx()
	defer cancel()
	vm, err := cn.vm(ctx, name)
	if err != nil {
		return nil, err
	}
	return &powerOp{a: a, c: cn.c, vm: vm, start: start}, nil
}

// patch sends a JSON merge patch of the VM's spec: only the fields named change.
func (p *powerOp) patch(spec map[string]any) error {
	body, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return err
	}
	ctx, cancel := p.a.ctx()
	defer cancel()
	if err := p.c.Patch(ctx, p.vm, client.RawPatch(types.MergePatchType, body), client.FieldOwner(fieldManager)); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("VirtualMachine %q was deleted", p.String())
		}
		return apiError("virtualmachines", "patching VirtualMachine "+p.String(), err)
	}
	return nil
}

// request asks for a new run: runRequestedAt now, or just after the last request and the last
// run's end when a clock behind the cluster's would make now look older (the controller acts only
// on a time later than the last request it acted on).
func (p *powerOp) request() (string, error) {
	at := p.a.now().UTC().Truncate(time.Second)
	for _, t := range []*metav1.Time{p.vm.Spec.RunRequestedAt, p.vm.Status.LastRunRequest} {
		if t != nil && !t.Time.Before(at) {
			at = t.Time.UTC().Truncate(time.Second).Add(time.Second)
		}
	}
	if t := p.vm.Status.LastTermination; t != nil && t.FinishedAt.Time.After(at) {
		at = t.FinishedAt.Time.UTC().Truncate(time.Second)
	}
	s := at.Format(time.RFC3339)
	return s, p.patch(map[string]any{"runRequestedAt": s})
}

// forceDelete deletes the runner pod at once, as the user, who needs pods/delete and nothing
// more of pods (unstructured: vmctl's client knows only virtpod's types).
func (p *powerOp) forceDelete() error {
	pod := &unstructured.Unstructured{}
	pod.SetAPIVersion("v1")
	pod.SetKind("Pod")
	pod.SetNamespace(p.vm.Namespace)
	pod.SetName(podspec.PodName(p.vm.Name))
	ctx, cancel := p.a.ctx()
	defer cancel()
	err := p.c.Delete(ctx, pod, client.GracePeriodSeconds(0))
	switch {
	case apierrors.IsNotFound(err):
		return p.say("has no runner pod to force-delete")
	case err != nil:
		return fmt.Errorf("force-deleting runner pod %s/%s: %w", pod.GetNamespace(), pod.GetName(), err)
	}
	return p.say("runner pod %s deleted with grace period 0 (--force): no clean guest shutdown", pod.GetName())
}

// ended is a VM whose run ended and stays ended under its run strategy.
func (p *powerOp) ended() bool {
	ph, s := p.vm.Status.Phase, p.vm.Spec.EffectiveRunStrategy()
	return (ph == vmv1.PhaseSucceeded || ph == vmv1.PhaseFailed) &&
		(s != vmv1.RunAlways && !(s == vmv1.RunRerunOnFailure && ph == vmv1.PhaseFailed))
}

// awaitRunning waits until the VM runs in a pod other than was (the pod before the request),
// and says where.
func (p *powerOp) awaitRunning(timeout time.Duration, was string) error {
	vm, err := p.await(timeout, vmv1.PhaseRunning, func(vm *vmv1.VirtualMachine) bool {
		return vm.Status.Phase == vmv1.PhaseRunning && vm.Status.PodUID != "" && vm.Status.PodUID != was
	})
	if err != nil {
		return err
	}
	st := vm.Status
	return p.say("Running after %s in runner pod %s (uid %s) on node %s, IP %s (user restarts %d, crash restarts %d)",
		p.since(), st.PodName, st.PodUID, st.Node, st.PodIP, st.UserRestartCount, st.RestartCount)
}

// await reads the VM until done says so, it fails for good, or the timeout passes.
func (p *powerOp) await(timeout time.Duration, want vmv1.Phase, done func(*vmv1.VirtualMachine) bool) (*vmv1.VirtualMachine, error) {
	deadline := p.a.now().Add(timeout)
	for {
		vm := &vmv1.VirtualMachine{}
		ctx, cancel := p.a.ctx()
		err := p.c.Get(ctx, client.ObjectKeyFromObject(p.vm), vm)
		cancel()
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("VirtualMachine %s was deleted", p)
		case err != nil:
			return nil, apiError("virtualmachines", "reading VirtualMachine "+p.String(), err)
		case done(vm):
			return vm, nil
		case want == vmv1.PhaseRunning && vm.Status.Phase == vmv1.PhaseFailed && vm.Status.PodUID != p.vm.Status.PodUID:
			return nil, fmt.Errorf("VM %s failed: %s", p, why(vm))
		}
		if !p.a.now().Before(deadline) {
			fmt.Fprintf(p.a.stderr, "error: VM %s is not %s after %s: it is %s: %s; the request stands\n", p, want, timeout, vm.Status.EffectivePhase(), why(vm))
			return nil, exitError{code: exitTimedOut}
		}
		time.Sleep(pollEvery)
	}
}

func (p *powerOp) say(format string, args ...any) error {
	_, err := fmt.Fprintf(p.a.stdout, "vm %s %s\n", p, fmt.Sprintf(format, args...))
	return err
}

func (p *powerOp) since() time.Duration { return p.a.now().Sub(p.start).Round(time.Second) }

// why is the VM's Ready message: what it waits for, or what went wrong.
func why(vm *vmv1.VirtualMachine) string {
	if c := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionReady); c != nil && c.Message != "" {
		return c.Reason + ": " + c.Message
	}
	return "no status yet"
}

func grace(vm *vmv1.VirtualMachine) int64 {
	if g := vm.Spec.TerminationGracePeriodSeconds; g != nil {
		return *g
	}
	return corev1.DefaultTerminationGracePeriodSeconds
}
