package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/runner/console"
	"github.com/virtpod/virtpod/runner/hypervisor"
	chdriver "github.com/virtpod/virtpod/runner/hypervisor/cloudhypervisor"
	qemudriver "github.com/virtpod/virtpod/runner/hypervisor/qemu"
	"github.com/virtpod/virtpod/runner/kvm"
	"github.com/virtpod/virtpod/runner/live"
	"github.com/virtpod/virtpod/runner/status"
	"github.com/virtpod/virtpod/runner/virtiofs"
)

// Run boots the guest described by cfg and supervises it until it ends.
func Run(ctx context.Context, cfg runnerconfig.Config, o Options) Outcome {
	board := status.New(cfg.Provider, cfg.Acceleration)
	ctx, o.Signals, o.prepared = stopWhilePreparing(ctx, o.Signals)
	out := stoppedOutcome(ctx, run(ctx, cfg, o, board))
	if out.Code == ExitOK {
		board.Set(status.StateStopped, out.Message)
	} else {
		board.Set(status.StateFailed, out.Message)
	}
	return out
}

// run is the runner's steps: check the host, prepare the guest's boot and disks, wire its
// network and shares, start the live operations' control API, and supervise the hypervisor.
// What a step started is undone, last first, as run returns.
func run(ctx context.Context, cfg runnerconfig.Config, o Options, board *status.Board) Outcome {
	if err := cfg.Validate(); err != nil {
		return failf(ExitError, "invalid configuration: %v", err)
	}
	binary, missing := checkBinaries(cfg, o)
	if missing != nil {
		return *missing
	}
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		return failf(ExitError, "--state-dir: %v", err)
	}
	stopHTTP, err := board.Serve(runnerconfig.HTTPEndpoint(cfg.HTTPAddr, cfg.StateDir))
	if err != nil {
		return failf(ExitError, "--http-addr: %v", err)
	}
	defer stopHTTP()
	if failed := probeKVM(ctx, cfg, o); failed != nil {
		return *failed
	}
	g := &guest{}
	defer g.close()
	if failed := g.prepare(ctx, &cfg, o, board); failed != nil {
		return *failed
	}
	if failed := g.wire(ctx, cfg, o, board); failed != nil {
		return *failed
	}
	m := g.machine(cfg, o)
	hv := newHypervisor(binary, cfg, o, m)
	ops := newLiveOps(cfg, o, hv, board, m)
	if cfg.Incoming {
		defer ops.mig.RemoveInSockets()
	}
	stopControl, failed := serveControl(cfg, o, ops, board)
	if failed != nil {
		return *failed
	}
	defer stopControl()
	hv = virtiofs.Watch(hv, g.shares, o.Log)
	hv, o.Stdout = console.Watch(hv, o.Stdout, cfg.Kernel == "")
	return supervise(ctx, cfg, o, board, hv, ops, console.Socket(cfg.StateDir), filepath.Join(cfg.StateDir, serialSocketName))
}

// checkBinaries finds the programs the guest needs in the runner image: its hypervisor (whose
// path it returns), qemu-img, and virtiofsd for shares; a missing one is the run's outcome.
func checkBinaries(cfg runnerconfig.Config, o Options) (string, *Outcome) {
	missing := func(name, path string) (string, *Outcome) {
		out := failf(ExitProviderMissing, "provider binary not found: %s (%s)", name, path)
		return "", &out
	}
	binary, binName := o.QEMUBinary, binaries.QEMUName
	if cfg.Provider == runnerconfig.ProviderCloudHypervisor {
		binary, binName = o.CloudHypervisorBinary, binaries.CloudHypervisorName
	}
	if err := checkBinary(binary); err != nil {
		return missing(binName, binary)
	}
	if err := checkBinary(o.QEMUImgBinary); err != nil {
		return missing(binaries.QEMUImgName, o.QEMUImgBinary)
	}
	if err := checkBinary(o.VirtiofsdBinary); err != nil && len(cfg.Filesystems) > 0 {
		out := failf(ExitProviderMissing, "%s not found (%s): spec.guest.filesystems needs a runner image with virtiofsd, such as the default runner (docs/filesystems.md)", binaries.VirtiofsdName, o.VirtiofsdBinary)
		return "", &out
	}
	return binary, nil
}

// probeKVM fails the run, loudly and at once, where the VM asked for KVM and the node's KVM
// cannot run a guest (kvm-pvm hangs stock kernels; a hang would be all the user saw).
func probeKVM(ctx context.Context, cfg runnerconfig.Config, o Options) *Outcome {
	if cfg.Acceleration != runnerconfig.AccelKVM || o.SkipKVMProbe {
		return nil
	}
	res := kvm.Probe(ctx, kvm.Options{Device: o.KVMDevice})
	o.Log.Info("kvm probe", zap.Bool("usable", res.Usable), zap.String("stage", res.Stage), zap.String("module", res.Module), zap.String("reason", res.Reason), zap.Duration("took", res.Duration))
	if !res.Usable {
		out := failf(ExitKVMUnusable, "acceleration kvm: KVM cannot run a guest on this node: %s", res)
		return &out
	}
	return nil
}

func checkBinary(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", path)
	}
	return nil
}

// newHypervisor is the driver of cfg's provider for machine m.
func newHypervisor(binary string, cfg runnerconfig.Config, o Options, m hypervisor.Machine) hypervisor.Hypervisor {
	if cfg.Provider == runnerconfig.ProviderCloudHypervisor {
		return chdriver.New(binary, m, o.Log)
	}
	return qemudriver.New(binary, o.Launcher, m, o.Log)
}

// liveOps are the operations on a running guest the control API serves and the supervisor
// acts with: resize, live migration, suspend, the guest agent, what the guest shows and counts
// (screenshots, stats), and disk hotplug.
type liveOps struct {
	resize  *live.Resize
	mig     *live.Migration
	sus     *live.Suspender
	agent   *live.GuestAgent
	screen  *live.Screenshot
	stats   *live.Stats
	hotplug *live.Hotplug
}

func newLiveOps(cfg runnerconfig.Config, o Options, hv hypervisor.Hypervisor, board *status.Board, m hypervisor.Machine) liveOps {
	mig := live.NewMigration(cfg, hv, board, o.Log)
	tap := ""
	if m.NIC != nil {
		tap = m.NIC.Tap
	}
	ops := liveOps{
		resize: live.NewResize(cfg, hv.(hypervisor.Resizer), o.ResizeTimeout, o.Log),
		mig:    mig,
		sus:    live.NewSuspender(cfg, hv, mig, board, o.Log),
		agent:  live.NewGuestAgent("", hv),
		screen: live.NewScreenshot(cfg, hv),
		stats:  live.NewStats(hv, tap),
	}
	if cfg.GuestAgent {
		ops.agent = live.NewGuestAgent(filepath.Join(cfg.StateDir, live.AgentSocketName), hv)
	}
	ops.hotplug = live.NewHotplug(cfg, hv, ops.sus, mig, board, o.Log)
	return ops
}

// serveControl serves the control API on cfg's control socket, if it names one. A target
// without it is the run's outcome (no stream could arrive); any other guest runs without it,
// and a resize then fails at the node agent, in words.
func serveControl(cfg runnerconfig.Config, o Options, ops liveOps, board *status.Board) (func(), *Outcome) {
	if cfg.ControlSocket == "" {
		return func() {}, nil
	}
	stop, err := live.Serve(cfg.ControlSocket, ops.resize.Routes, ops.mig.Routes, ops.agent.Routes, ops.sus.Routes, ops.screen.Routes, ops.stats.Routes, live.NewBackup(cfg, ops.sus, ops.mig, ops.agent, board, o.Log).Routes,
		ops.hotplug.Routes, board.ControlRoutes)
	switch {
	case err != nil && cfg.Incoming:
		return nil, fail(ExitError, err, "--incoming: no control socket, so no stream can arrive")
	case err != nil:
		o.Log.Error("no control socket: the guest cannot be resized", zap.String("socket", cfg.ControlSocket), zap.Error(err))
		return func() {}, nil
	}
	o.Log.Info("control API", zap.String("socket", cfg.ControlSocket), zap.Int32("maxCPUs", cfg.EffectiveMaxCPUs()), zap.Int64("maxMemoryMiB", cfg.EffectiveMaxMemoryMiB()))
	return stop, nil
}
