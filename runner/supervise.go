package runner

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/boot"
	"github.com/virtpod/virtpod/runner/console"
	"github.com/virtpod/virtpod/runner/hypervisor"
	"github.com/virtpod/virtpod/runner/live"
	"github.com/virtpod/virtpod/runner/status"
)

// supervisor runs one guest from its hypervisor's start to its exit: it starts the guest in
// one of three ways (a boot, a migration's arrival, a saved state's load), then answers what
// comes — the pod's stop signal, the hypervisor's events, the boot watchdog, a suspend — until
// the hypervisor exits, and reads the outcome from what it saw.
type supervisor struct {
	ctx   context.Context
	cfg   runnerconfig.Config
	o     Options
	log   *zap.Logger
	board *status.Board
	hv    hypervisor.Hypervisor
	parts liveOps
	st    runState

	// What the loop waits on; nil while off.
	poll                     *time.Ticker
	incomingPoll             <-chan time.Time // a target's or a resume's check of the stream
	loadFailed               chan error       // the saved state could not be fed
	firstOutput              <-chan struct{}  // the guest's first console line
	watchdog, grace, repress <-chan time.Time
}

func supervise(ctx context.Context, cfg runnerconfig.Config, o Options, board *status.Board, hv hypervisor.Hypervisor, parts liveOps, consoleSocket, serial string) Outcome {
	s := &supervisor{ctx: ctx, cfg: cfg, o: o, log: o.Log, board: board, hv: hv, parts: parts}
	board.Set(status.StateStarting, "")
	if o.prepared != nil {
		o.prepared() // from here a stop signal is the supervisor's: it powers the guest down
	}
	if err := hv.Start(ctx); err != nil {
		hv.Kill()
		if kvmFailure(cfg, err.Error()) {
			return failf(ExitKVMUnusable, "acceleration kvm: KVM could not run the guest: %s could not start it: %v", cfg.Provider, err)
		}
		return failf(ExitHypervisorFailed, "start %s: %v", cfg.Provider, err)
	}
	board.SetHypervisor(hv.Version(), cfg.MachineRun(hv.Version()))
	actx, cancel := context.WithTimeout(ctx, 15*time.Second)
	con, err := console.Attach(actx, serial, consoleSocket, o.Stdout)
	cancel()
	if err != nil {
		hv.Kill()
		return failf(ExitHypervisorFailed, "%v", err)
	}
	defer con.Close()
	defer func() {
		if s.poll != nil {
			s.poll.Stop()
		}
	}()
	if failed := s.begin(consoleSocket); failed != nil {
		hv.Kill()
		<-hv.Exited()
		return *failed
	}
	s.st.kernelOutput, s.firstOutput = con.KernelOutput(), con.KernelOutput()
	if cfg.Acceleration == runnerconfig.AccelKVM && o.BootWatchdog > 0 && !cfg.Incoming {
		s.watchdog = time.After(o.BootWatchdog)
	}
	return s.loop()
}

// begin starts the guest as the configuration says; a failure is the run's outcome.
func (s *supervisor) begin(consoleSocket string) *Outcome {
	switch {
	case s.cfg.ResumeFrom != "":
		return s.beginResume()
	case s.cfg.Incoming:
		return s.beginIncoming()
	}
	if err := s.hv.Resume(s.ctx); err != nil {
		out := failf(ExitHypervisorFailed, "start the guest: %v (%s)", err, s.hv.ExitDetail())
		return &out
	}
	s.log.Info("guest started", zap.String("hypervisor", s.cfg.Provider), zap.String("version", s.hv.Version()), zap.String("console", consoleSocket))
	return nil
}

// beginResume continues the guest from a suspend's saved state: QEMU loads it from the stream
// the runner feeds it, and it is resumed, as a migration's target, once loaded.
func (s *supervisor) beginResume() *Outcome {
	s.st.target, s.st.incoming, s.st.resuming = true, true, true
	mig := s.parts.mig
	if err := mig.Migrator().MigrationEvents(); err != nil {
		s.log.Warn("no migration events; polling only", zap.Error(err))
	}
	if err := mig.Migrator().ListenIncoming(); err != nil {
		out := failf(ExitIncomingFailed, "resume from %s: %v", s.cfg.ResumeFrom, err)
		return &out
	}
	s.board.Set(status.StateIncoming, "loading the guest's saved state from "+s.cfg.ResumeFrom)
	s.log.Info("resuming the guest from its saved state", zap.String("from", s.cfg.ResumeFrom))
	s.loadFailed = make(chan error, 1)
	go func() {
		if err := live.FeedState(s.ctx, s.cfg.ResumeFrom, filepath.Join(s.cfg.StateDir, live.ResumeSocketName)); err != nil {
			s.loadFailed <- err
		}
	}()
	s.pollIncoming()
	return nil
}

// beginIncoming waits for a guest that arrives already running elsewhere: nothing boots here,
// so neither the boot watchdog nor the kernel-output checks apply; it is resumed once the
// stream completed.
func (s *supervisor) beginIncoming() *Outcome {
	s.st.target, s.st.incoming = true, true
	mig := s.parts.mig
	if err := mig.Migrator().MigrationEvents(); err != nil {
		s.log.Warn("no migration events; polling only", zap.Error(err))
	}
	if err := mig.Migrator().ExportDisks(mig.NBDInSocket(), mig.Drives()); err != nil {
		out := failf(ExitIncomingFailed, "incoming migration: serving the disks for the source's mirrors: %v", err)
		return &out
	}
	// Only now the memory socket: a source that finds it finds the disks served too.
	if err := mig.Migrator().ListenIncoming(); err != nil {
		out := failf(ExitIncomingFailed, "incoming migration: %v", err)
		return &out
	}
	s.board.Set(status.StateIncoming, "waiting for the guest on "+mig.InSocket())
	s.log.Info("waiting for the migrating guest", zap.String("socket", mig.InSocket()))
	s.pollIncoming()
	return nil
}

// pollIncoming checks the incoming stream on a tick, beside its events, until the guest
// arrived; supervise stops the ticker as it returns.
func (s *supervisor) pollIncoming() {
	s.poll = time.NewTicker(incomingPollInterval)
	s.incomingPoll = s.poll.C
}

// quit stops the hypervisor at once, and kills it if it does not listen.
func (s *supervisor) quit(why string) {
	s.log.Info("stopping the hypervisor", zap.String("why", why))
	if err := s.hv.Quit(s.ctx); err != nil {
		s.log.Warn("quit failed; killing", zap.Error(err))
		s.hv.Kill()
	}
}

// loop answers what comes until the hypervisor exits.
func (s *supervisor) loop() Outcome {
	for {
		select {
		case <-s.incomingPoll:
			if info, err := s.parts.mig.Migrator().QueryMigrate(); err == nil && info.Status == "completed" {
				s.arrived("query-migrate")
			}
		case err := <-s.loadFailed:
			s.st.loadError = err.Error()
			s.quit("the saved state could not be loaded")
		case <-s.parts.sus.Saved():
			s.st.suspended = true
			s.quit("suspended: the guest's state is saved")
		case <-s.firstOutput:
			s.firstOutput, s.watchdog = nil, nil
		case <-s.watchdog:
			s.watchdog = nil
			s.st.watchdogFired = true
			s.quit("boot watchdog: no kernel output")
		case sig := <-s.o.Signals:
			s.stop(sig)
		case <-s.repress:
			// A guest still booting when the first press came had nothing listening for the
			// power button yet; pressing again is harmless to one that is already going down.
			if s.st.shutdown == nil {
				_ = s.hv.Powerdown(s.ctx)
				s.repress = time.After(powerdownRepeat)
			}
		case <-s.grace:
			s.grace = nil
			s.st.forced = true
			s.quit("grace period over")
		case ev := <-s.hv.Events():
			s.event(ev)
		case <-s.hv.Exited():
			for drained := false; !drained; {
				select {
				case ev := <-s.hv.Events():
					s.st.apply(ev, s.board, s.parts.mig, s.log)
				default:
					drained = true
				}
			}
			return s.st.outcome(s.cfg, s.o, s.hv)
		}
	}
}

// event records a hypervisor event and answers the ones that end or complete the run.
func (s *supervisor) event(ev hypervisor.Event) {
	s.st.apply(ev, s.board, s.parts.mig, s.log)
	switch ev.Kind {
	case hypervisor.EventMigration:
		if s.st.target && ev.Reason == "completed" {
			s.arrived("event")
		}
	case hypervisor.EventPanicked:
		s.quit("guest panicked")
	case hypervisor.EventNoBootableDevice:
		s.quit("no bootable device")
	}
}

// stop answers the pod's stop signal, once: the guest is powered down within its grace period,
// by its agent first, else by the ACPI power button; a guest that is not here is not waited for.
func (s *supervisor) stop(sig os.Signal) {
	if s.st.stopping != "" {
		return
	}
	s.st.stopping = signalName(sig)
	s.board.Set(status.StateStopping, "received "+s.st.stopping)
	if s.st.migrated || s.st.incoming {
		// No guest of this pod's to power down: it runs elsewhere, or never arrived.
		s.quit("received " + s.st.stopping + " with the guest not here")
		return
	}
	s.parts.mig.CancelActive()
	s.log.Info("powering the guest down", zap.String("signal", s.st.stopping), zap.Int64("gracePeriodSeconds", s.cfg.GracePeriodSeconds))
	s.grace = time.After(graceEnd(sig, time.Duration(s.cfg.GracePeriodSeconds)*time.Second))
	// The guest's agent first: it shuts the guest down as its own shutdown command would, where
	// the power button depends on what the guest does with it (ACPI follows should the guest
	// still run after agentShutdownWait).
	actx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	err := s.parts.agent.Shutdown(actx)
	cancel()
	if err == nil {
		s.log.Info("asked the guest agent to power the guest off")
		s.repress = time.After(agentShutdownWait)
		return
	}
	s.log.Info("no guest agent to power the guest off; pressing the ACPI power button", zap.String("why", err.Error()))
	if err := s.hv.Powerdown(s.ctx); err != nil {
		s.log.Warn("ACPI power-down failed", zap.Error(err))
		s.quit("power-down failed")
	}
	s.repress = time.After(powerdownRepeat)
}

// arrived resumes a target's guest once its stream completed.
func (s *supervisor) arrived(how string) {
	if !s.st.incoming || s.st.stopping != "" {
		return // a target being stopped never runs its guest
	}
	s.st.incoming, s.incomingPoll = false, nil
	s.parts.mig.SetArrived()
	if s.st.resuming {
		// The state is removed before the guest runs: once it runs, its disks move on and that
		// state would no longer match them, so it must never be loaded again.
		if err := live.RemoveState(s.cfg.ResumeFrom); err != nil {
			s.st.loadError = "the loaded state could not be removed, so the guest is not resumed: " + err.Error()
			s.quit("the loaded state could not be removed")
			return
		}
		s.log.Info("the guest's saved state is loaded and removed; resuming it", zap.String("seen", how))
		if err := s.hv.Resume(s.ctx); err != nil {
			s.log.Error("resuming the loaded guest failed", zap.Error(err))
			s.quit("resume failed")
		}
		return
	}
	s.log.Info("the migrating guest arrived; resuming it", zap.String("seen", how))
	if err := s.parts.mig.Migrator().StopExports(); err != nil {
		// The source completed its mirrors before the switch and no longer writes.
		s.log.Warn("stopping the disks' NBD exports", zap.Error(err))
	}
	if err := boot.MarkReceived(s.cfg); err != nil {
		// The guest runs here and nowhere else now: it keeps running, and a later start from
		// these claims refuses them as partial, which this line explains.
		s.log.Error("recording the received disks as complete failed", zap.Error(err))
	}
	if err := s.hv.Resume(s.ctx); err != nil {
		s.log.Error("resuming the arrived guest failed", zap.Error(err))
		s.quit("resume failed")
	}
}

// incomingPollInterval is how often a waiting target looks whether its guest arrived, should a
// MIGRATION event be missed; the event normally resumes it at once.
const incomingPollInterval = 500 * time.Millisecond

// powerdownRepeat is how often the ACPI power button is pressed again while the guest has not
// shut down.
const powerdownRepeat = 3 * time.Second

// agentShutdownWait is how long a guest the agent was asked to power off has before the ACPI
// power button is pressed as well.
const agentShutdownWait = 10 * time.Second
