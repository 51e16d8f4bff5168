package runner

import (
	"strings"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/runner/hypervisor"
	"github.com/virtpod/virtpod/runner/live"
	"github.com/virtpod/virtpod/runner/status"
)

// runState is what the supervisor has seen; the outcome is decided from it when the
// hypervisor exits.
type runState struct {
	stopping      string // the signal that asked for a stop, "" if none
	forced        bool   // the grace period ran out and the hypervisor was stopped
	watchdogFired bool
	panicked      string
	noBootable    string // the firmware's console line saying it found nothing to boot
	shutdown      *hypervisor.Event
	kernelOutput  <-chan struct{} // closed once the guest kernel printed a line
	// A migration target: incoming until its guest arrived and runs. A source: migrated once
	// its guest runs in another pod (until a DELETE resumes it here).
	target, incoming, migrated bool
	// Resuming from a saved state (a target whose stream is a file); suspended once a suspend
	// saved the guest, which then never runs here again.
	resuming, suspended bool
	loadError           string // why feeding the saved state failed
}

func (st *runState) apply(ev hypervisor.Event, board *status.Board, mig *live.Migration, log *zap.Logger) {
	log.Info("guest event", zap.Stringer("kind", ev.Kind), zap.Bool("guest", ev.Guest), zap.String("reason", ev.Reason))
	switch ev.Kind {
	case hypervisor.EventRunning:
		st.migrated = false // a source resumed after a completed send
		if st.stopping == "" {
			board.Set(status.StateRunning, "")
		}
	case hypervisor.EventMigration:
		if ev.Reason == "completed" || ev.Reason == "failed" || ev.Reason == "cancelled" {
			go mig.LogResult(ev.Reason)
		}
		// Only a send of this runner's own: a target also sees its arrival's "completed".
		if ev.Reason == "completed" && mig.Sending() && st.stopping == "" {
			st.migrated = true
			board.Set(status.StateMigrated, MessageMigrated)
		}
	case hypervisor.EventPaused:
		if st.stopping == "" && st.shutdown == nil {
			board.Set(status.StatePaused, ev.Reason)
		}
	case hypervisor.EventShutdown:
		e := ev
		st.shutdown = &e
		board.Set(status.StateStopping, ev.Reason)
	case hypervisor.EventPanicked:
		st.panicked = ev.Reason
	case hypervisor.EventNoBootableDevice:
		st.noBootable = ev.Reason
	}
}

func (st *runState) outcome(cfg runnerconfig.Config, o Options, hv hypervisor.Hypervisor) Outcome {
	name := binaries.QEMUName
	if cfg.Provider == runnerconfig.ProviderCloudHypervisor {
		name = binaries.CloudHypervisorName
	}
	switch {
	case st.migrated:
		return Outcome{Code: ExitOK, Message: MessageMigrated}
	case st.suspended:
		return Outcome{Code: ExitOK, Message: MessageSuspended + cfg.SuspendTo}
	case st.resuming && st.incoming && st.stopping != "":
		return failf(ExitIncomingFailed, "resume from %s: stopped on %s before the saved state was loaded; the saved state is kept", cfg.ResumeFrom, st.stopping)
	case st.resuming && st.incoming && st.loadError != "":
		return failf(ExitIncomingFailed, "resume from %s failed: %s; the saved state is kept", cfg.ResumeFrom, st.loadError)
	case st.resuming && st.incoming:
		return failf(ExitIncomingFailed, "resume from %s failed: %s did not load the saved state: %s; the saved state is kept", cfg.ResumeFrom, name, hv.ExitDetail())
	case st.incoming && st.stopping != "":
		return failf(ExitIncomingFailed, "incoming migration: stopped on %s before the guest arrived", st.stopping)
	case st.incoming:
		return failf(ExitIncomingFailed, "incoming migration failed: the guest never arrived: %s", hv.ExitDetail())
	case st.watchdogFired:
		return failf(ExitKVMUnusable, "acceleration kvm: KVM could not run the guest: the guest kernel printed nothing within %s (at most the boot stub's lines); this node's KVM cannot run guest kernels (schedule the VM on a node with hardware virtualization, or set acceleration to Emulated)", o.BootWatchdog)
	case st.noBootable != "":
		return noBootableOutcome(cfg, st.noBootable)
	case st.panicked != "":
		return failf(ExitGuestPanicked, "guest kernel panicked (%s)", st.panicked)
	case st.forced:
		return failf(ExitGraceExpired, "guest did not power off within the grace period (%ds) after %s; %s was stopped", cfg.GracePeriodSeconds, st.stopping, name)
	case st.shutdown != nil && st.shutdown.Guest:
		if st.stopping != "" {
			return Outcome{Code: ExitOK, Message: "stopped on " + st.stopping + ": guest powered off"}
		}
		return Outcome{Code: ExitOK, Message: "guest powered off (" + st.shutdown.Reason + ")"}
	default:
		detail := hv.ExitDetail()
		select {
		case <-st.kernelOutput:
		default:
			if !st.target && kvmFailure(cfg, detail) {
				return failf(ExitKVMUnusable, "acceleration kvm: KVM could not run the guest: %s exited before the guest kernel printed anything: %s", name, detail)
			}
		}
		return failf(ExitHypervisorFailed, "%s exited unexpectedly: %s", name, detail)
	}
}

// kvmFailure tells a hypervisor failure caused by KVM (QEMU's KVM code failing, as with -cpu
// host on kvm-pvm) from other failures, so the exit names KVM as the cause.
func kvmFailure(cfg runnerconfig.Config, detail string) bool {
	return cfg.Acceleration == runnerconfig.AccelKVM && strings.Contains(strings.ToLower(detail), "kvm")
}
