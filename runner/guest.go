package runner

import (
	"context"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/boot"
	"github.com/virtpod/virtpod/runner/hypervisor"
	"github.com/virtpod/virtpod/runner/live"
	"github.com/virtpod/virtpod/runner/podnet"
	"github.com/virtpod/virtpod/runner/status"
	"github.com/virtpod/virtpod/runner/virtiofs"
)

// guest is what the runner prepares for one run: the machine a driver boots, in the neutral
// words each driver translates, and what must be undone when the run ends.
type guest struct {
	m      hypervisor.Machine
	bz     *os.File // the kernel, when it is a bzImage to hand to the node agent
	bzSize int64
	shares *virtiofs.Shares
	undo   []func()
}

// close undoes what prepare and wire did, last first.
func (g *guest) close() {
	for i := len(g.undo) - 1; i >= 0; i-- {
		g.undo[i]()
	}
}

// prepare readies what the guest boots from: its kernel or firmware, its root disk, its data
// disks and its cloud-init seed. A failure is the run's outcome.
func (g *guest) prepare(ctx context.Context, cfg *runnerconfig.Config, o Options, board *status.Board) *Outcome {
	log := o.Log
	var err error
	if g.m.Boot, err = boot.Files(*cfg, log); err != nil {
		return fail(ExitError, err)
	}
	if g.bz, g.bzSize = boot.OpenBzImage(*cfg); g.bz != nil {
		g.undo = append(g.undo, func() { g.bz.Close() })
	}
	if err := boot.ResolveRootDisk(cfg); err != nil {
		return fail(ExitRootDiskUnusable, err, "root disk")
	}
	if g.m.Root, err = boot.RootDisk(ctx, *cfg, o.QEMUImgBinary, board, log); err != nil {
		return fail(ExitError, err)
	}
	g.m.SeedDirect = boot.DirectIn(cfg.StateDir)
	disks, cleanDisks, err := boot.Disks(*cfg, log)
	if err != nil {
		return fail(ExitError, err)
	}
	g.m.Disks = disks
	g.undo = append(g.undo, cleanDisks)
	if g.m.Seed, err = boot.Seed(*cfg); err != nil {
		return fail(ExitError, err, "cloud-init seed")
	}
	if seed := g.m.Seed; seed != "" {
		// The image holds the Secret's data on the node's disk: gone when the guest is.
		g.undo = append(g.undo, func() { os.Remove(seed) })
		log.Info("cloud-init seed", zap.String("image", seed), zap.String("instanceID", cfg.InstanceID), zap.Bool("networkConfig", cfg.CloudInitNetworkData != ""))
	}
	return nil
}

// wire connects the guest to its pod: the network, through the node agent (which answers a
// bzImage handed over with it with the PVH kernel inside), and the virtio-fs shares.
func (g *guest) wire(ctx context.Context, cfg runnerconfig.Config, o Options, board *status.Board) *Outcome {
	network, err := podnet.Setup(ctx, cfg, podnet.Options{ResolvConf: o.ResolvConf, Log: o.Log}, board, g.bz)
	if err != nil {
		return fail(ExitError, err, "--network="+cfg.Network.Flag())
	}
	g.undo = append(g.undo, network.Close)
	boot.LogKernel(cfg, g.bzSize, network.Kernel, o.Log)
	g.m.Boot.KernelFile = network.Kernel.File
	if cfg.Kernel != "" {
		g.m.Boot.Cmdline = boot.Cmdline(cfg.KernelArgs, network.IPArg, cfg.MaxMemoryMiB > cfg.MemoryMiB)
	}
	if pl := network.Plumbing; pl != nil {
		g.m.NIC = &hypervisor.NIC{Tap: pl.Tap, TapFile: pl.TapFile, MAC: pl.GuestMAC, MTU: pl.Pod.MTU}
	}
	shares, fs, err := virtiofs.Start(cfg, o.VirtiofsdBinary, o.Launcher, o.Log)
	if err != nil {
		return fail(ExitError, err)
	}
	g.shares, g.m.Shares = shares, fs
	g.undo = append(g.undo, shares.Stop)
	return nil
}

// machine is the prepared guest with cfg's identity and size, and the sockets the runner
// reaches its hypervisor on.
func (g *guest) machine(cfg runnerconfig.Config, o Options) hypervisor.Machine {
	m := g.m
	m.Name, m.Acceleration, m.Type, m.CPUModel, m.GuestSize = cfg.Name, cfg.Acceleration, cfg.Machine, o.CPUModel, cfg.GuestSize
	m.HotplugSlots = cfg.HotplugSlots
	m.Sockets = hypervisor.Sockets{Serial: filepath.Join(cfg.StateDir, serialSocketName), Control: filepath.Join(cfg.StateDir, qmpSocketName)}
	switch {
	case cfg.Provider == runnerconfig.ProviderCloudHypervisor:
		m.Sockets.Control = filepath.Join(cfg.StateDir, chAPISocketName)
	case cfg.ResumeFrom != "":
		m.Sockets.Incoming = filepath.Join(cfg.StateDir, live.ResumeSocketName)
	case cfg.Incoming:
		m.Sockets.Incoming = filepath.Join(filepath.Dir(cfg.ControlSocket), controlapi.MigrateInSocket)
	}
	if cfg.GuestAgent {
		m.Sockets.Agent = filepath.Join(cfg.StateDir, live.AgentSocketName)
	}
	if cfg.Display == runnerconfig.DisplayVNC {
		m.Sockets.Display = hypervisor.VNCSocket(cfg.StateDir)
	}
	return m
}
