package vmctl

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// suspend and resume set spec.suspend, as the power verbs set runStrategy: the controller and
// the node agent do the rest, and --wait follows the VM's status.

func (a *app) suspendCmd() *cobra.Command {
	var f powerFlags
	cmd := &cobra.Command{
		Use:   "suspend VM",
		Short: "Park a running guest on its state claim and free its pod (spec.suspend)",
		Long: `Suspend sets the VM's spec.suspend to true. The guest is paused, its state (memory and devices) is
saved on spec.guest.stateClaim, and its runner pod is removed: the VM holds no CPU or memory
(phase Suspended). vmctl resume continues the guest where it stopped. The VM needs a state claim
from its runner pod's start; the Suspended condition says why a suspend cannot be done.

Exit codes: 0 suspended (or asked, with --wait=false), 1 failed (the VM is missing, has no state
claim, the API server refused), 2 wrong command line, 4 --timeout passed before the VM was
Suspended.`,
		Example: `  vmctl suspend dev
  vmctl suspend dev --wait=false`,
		Args: a.powerArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			p, err := a.power(args[0])
			if err != nil {
				return err
			}
			if p.vm.Spec.Guest.StateClaim == nil {
				fmt.Fprintf(a.stderr, "error: VM %s has no spec.guest.stateClaim: name a Filesystem claim of at least its memory plus 64Mi, then restart it so its runner pod mounts the claim (docs/api.md#suspend-and-resume)\n", p)
				return exitError{code: 1}
			}
			if p.vm.Spec.Suspend && p.vm.Status.Phase == vmv1.PhaseSuspended {
				return p.say("is already suspended")
			}
			if err := p.patch(map[string]any{"suspend": true}); err != nil {
				return err
			}
			if err := p.say("spec.suspend true: the guest's state is saved on claim %s", p.vm.Spec.Guest.StateClaim.ClaimName); err != nil {
				return err
			}
			if !f.wait {
				return nil
			}
			vm, err := p.await(f.timeout, vmv1.PhaseSuspended, func(vm *vmv1.VirtualMachine) bool {
				c := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionSuspended)
				cannot := c != nil && c.Reason == vmv1.ReasonNotSuspendable && c.ObservedGeneration >= vm.Generation
				return vm.Status.Phase == vmv1.PhaseSuspended && vm.Status.SuspendedState != nil || cannot
			})
			if err != nil {
				return err
			}
			if vm.Status.SuspendedState == nil {
				return fmt.Errorf("VM %s cannot be suspended: %s", p, suspendNote(vm))
			}
			return p.say("Suspended after %s: the state is on claim %s", p.since(), vm.Status.SuspendedState.ClaimName)
		},
	}
	f.add(cmd, "Suspended")
	return cmd
}

func (a *app) resumeCmd() *cobra.Command {
	var f powerFlags
	cmd := &cobra.Command{
		Use:   "resume VM",
		Short: "Continue a suspended guest where it stopped (spec.suspend false)",
		Long: `Resume sets the VM's spec.suspend to false. A new runner pod loads the saved state and the guest
continues where it stopped: its processes, its memory, its address in the Masquerade network mode.
The state is consumed once the guest runs. (vmctl restart instead discards it and boots afresh.)

Exit codes: 0 running (or asked, with --wait=false), 1 failed (the VM is missing, the API server
refused, the state could not be loaded), 2 wrong command line, 4 --timeout passed before the VM
was Running.`,
		Example: `  vmctl resume dev`,
		Args:    a.powerArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			p, err := a.power(args[0])
			if err != nil {
				return err
			}
			if !p.vm.Spec.Suspend {
				return p.say("is not suspended (phase %s)", p.vm.Status.EffectivePhase())
			}
			was := p.vm.Status.PodUID
			if err := p.patch(map[string]any{"suspend": false}); err != nil {
				return err
			}
			if err := p.say("spec.suspend false: resuming"); err != nil {
				return err
			}
			if !f.wait {
				return nil
			}
			return p.awaitRunning(f.timeout, was)
		},
	}
	f.add(cmd, "Running")
	return cmd
}

// suspendNote is the Suspended condition's reason and message: why a suspend cannot happen.
func suspendNote(vm *vmv1.VirtualMachine) string {
	if c := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionSuspended); c != nil {
		return c.Reason + ": " + c.Message
	}
	return ""
}
