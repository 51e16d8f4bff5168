package runner

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/diskimage"
	"github.com/virtpod/virtpod/pkg/qemu"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/vmimage/diskfile"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/runner/hypervisor"
	chdriver "github.com/virtpod/virtpod/runner/hypervisor/cloudhypervisor"
	qemudriver "github.com/virtpod/virtpod/runner/hypervisor/qemu"
	"github.com/virtpod/virtpod/runner/kvm"
)

// Options are the runner's own settings, as opposed to the VM's configuration.
type Options struct {
	QEMUBinary            string
	QEMUImgBinary         string
	CloudHypervisorBinary string
	VirtiofsdBinary       string // serves --filesystem shares; only needed when there are some
	KVMDevice             string
	// SkipKVMProbe leaves only the boot watchdog to catch a KVM that cannot run guests.
	SkipKVMProbe bool
	CPUModel     string // QEMU -cpu; "" for the default
	ResolvConf   string
	// BootWatchdog: under kvm, a guest that prints nothing on its console for this long is
	// taken as one KVM cannot run. 0 disables it.
	BootWatchdog time.Duration
	Stdout       io.Writer // the guest console
	// Launcher, when set, is put in front of QEMU's argv: the runner's own exec-unprivileged
	// command, which starts QEMU without capabilities (see dropcaps.Exec).
	Launcher []string
	Log      *zap.Logger
	Signals  <-chan os.Signal
	prepared func() // ends stopWhilePreparing's watch, as the hypervisor starts
	// ResizeTimeout bounds how long a resize waits for the guest; 0 is DefaultResizeTimeout.
	ResizeTimeout time.Duration
}

// Files the runner keeps in the state directory.
const (
	qmpSocketName     = "qmp.sock"
	serialSocketName  = "serial.sock"
	consoleSocketName = "console.sock"
	chAPISocketName   = "cloud-hypervisor.sock"
	overlayName       = "root.qcow2"
)

// Run boots the guest described by cfg and supervises it until it ends.
func Run(ctx context.Context, cfg runnerconfig.Config, o Options) Outcome {
	board := &statusBoard{s: Status{State: StatePreparing, Hypervisor: cfg.Provider, Acceleration: cfg.Acceleration}}
	ctx, o.Signals, o.prepared = stopWhilePreparing(ctx, o.Signals)
	out := stoppedOutcome(ctx, run(ctx, cfg, o, board))
	if out.Code == ExitOK {
		board.set(StateStopped, out.Message)
	} else {
		board.set(StateFailed, out.Message)
	}
	return out
}

func run(ctx context.Context, cfg runnerconfig.Config, o Options, board *statusBoard) Outcome {
	log := o.Log
	if err := cfg.Validate(); err != nil {
		return failf(ExitError, "invalid configuration: %v", err)
	}
	binary, binName := o.QEMUBinary, binaries.QEMUName
	if cfg.Provider == runnerconfig.ProviderCloudHypervisor {
		binary, binName = o.CloudHypervisorBinary, binaries.CloudHypervisorName
	}
	if err := checkBinary(binary); err != nil {
		return failf(ExitProviderMissing, "provider binary not found: %s (%s)", binName, binary)
	}
	if err := checkBinary(o.QEMUImgBinary); err != nil {
		return failf(ExitProviderMissing, "provider binary not found: %s (%s)", binaries.QEMUImgName, o.QEMUImgBinary)
	}
	if err := checkBinary(o.VirtiofsdBinary); err != nil && len(cfg.Filesystems) > 0 {
		return failf(ExitProviderMissing, "%s not found (%s): spec.guest.filesystems needs a runner image with virtiofsd, such as the Debian 13 runner (docs/filesystems.md)", binaries.VirtiofsdName, o.VirtiofsdBinary)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		return failf(ExitError, "--state-dir: %v", err)
	}
	stopHTTP, err := board.serve(runnerconfig.HTTPEndpoint(cfg.HTTPAddr, cfg.StateDir))
	if err != nil {
		return failf(ExitError, "--http-addr: %v", err)
	}
	defer stopHTTP()

	if cfg.Acceleration == runnerconfig.AccelKVM && !o.SkipKVMProbe {
		res := kvm.Probe(ctx, kvm.Options{Device: o.KVMDevice})
		log.Info("kvm probe", zap.Bool("usable", res.Usable), zap.String("stage", res.Stage), zap.String("module", res.Module), zap.String("reason", res.Reason), zap.Duration("took", res.Duration))
		if !res.Usable {
			return failf(ExitKVMUnusable, "acceleration kvm: KVM cannot run a guest on this node: %s", res)
		}
	}

	var fw firmwareFiles
	if cfg.Kernel == "" {
		if fw, err = prepareFirmware(cfg); err != nil {
			return failf(ExitError, "--firmware=%s: %v", cfg.Firmware, err)
		}
		log.Info("booting the root disk through firmware", zap.String("firmware", fw.kind), zap.String("code", fw.code), zap.String("vars", fw.vars))
	} else if _, err := os.Stat(cfg.Kernel); err != nil {
		return failf(ExitError, "--kernel: %v", err)
	}
	bz, bzSize := openBzImage(cfg)
	if bz != nil {
		defer bz.Close()
	}
	initrd := cfg.Initrd
	if initrd != "" {
		if _, err := os.Stat(initrd); err != nil {
			log.Info("no initrd; booting without one", zap.String("initrd", initrd))
			initrd = ""
		}
	}
	// --root-disk names the disk, or the VM image's /disk, which holds it as root.img or as a
	// containerDisk's one disk file; with a root volume it is what fills the volume once.
	if cfg.RootDisk != "" {
		base, _, err := diskfile.Resolve(cfg.RootDisk)
		if err != nil {
			return failf(ExitRootDiskUnusable, "root disk: %v", err)
		}
		cfg.RootDisk = base
	}
	direct := diskimage.SupportsDirectIO(cfg.StateDir)
	root := rootDisk{cache: qemu.CacheWriteback}
	if direct {
		root.cache = qemu.CacheNone
	}
	if cfg.RootVolume != nil {
		if root, err = prepareRootVolume(ctx, cfg, o.QEMUImgBinary, board, log); err != nil {
			return failf(ExitError, "%v", err)
		}
	} else {
		overlay, err := diskimage.CreateOverlay(ctx, o.QEMUImgBinary, cfg.RootDisk, filepath.Join(cfg.StateDir, overlayName), cfg.DiskSizeMiB)
		if err != nil {
			return failf(ExitError, "%v", err)
		}
		log.Info("root disk", zap.String("overlay", overlay.Path), zap.String("base", overlay.Base), zap.String("baseFormat", overlay.BaseFormat), zap.Int64("sizeBytes", overlay.SizeBytes), zap.Bool("reused", overlay.Reused))
		root.path, root.format = overlay.Path, overlay.Format
	}
	drives, cleanDisks, err := prepareDisks(cfg, log)
	if err != nil {
		return failf(ExitError, "%v", err)
	}
	defer cleanDisks()
	seed, err := writeSeed(cfg)
	if err != nil {
		return failf(ExitError, "cloud-init seed: %v", err)
	}
	if seed != "" {
		// The image holds the Secret's data on the node's disk: gone when the guest is.
		defer os.Remove(seed)
		log.Info("cloud-init seed", zap.String("image", seed), zap.String("instanceID", cfg.InstanceID), zap.Bool("networkConfig", cfg.CloudInitNetworkData != ""))
	}

	network, err := setupNetwork(ctx, cfg, o, board, bz)
	if err != nil {
		return failf(ExitError, "--network=%s: %v", cfg.Network, err)
	}
	defer network.close()
	logKernel(cfg, bzSize, network, log)
	plumbing, ipArg := network.plumbing, network.ipArg
	cmdline := ""
	if cfg.Kernel != "" {
		cmdline = kernelCmdline(cfg.KernelArgs, ipArg, cfg.MaxMemoryMiB > cfg.MemoryMiB)
	}

	shared, fs, err := startShares(cfg, o, log)
	if err != nil {
		return failf(ExitError, "%v", err)
	}
	defer shared.stop()

	var hv hypervisor.Hypervisor
	serial := filepath.Join(cfg.StateDir, serialSocketName)
	switch cfg.Provider {
	case runnerconfig.ProviderQEMU:
		spec := qemu.Spec{
			Name: cfg.Name, Acceleration: cfg.Acceleration, Machine: cfg.Machine, CPUModel: o.CPUModel, CPUs: cfg.CPUs, MemoryMiB: cfg.MemoryMiB,
			MaxCPUs: cfg.MaxCPUs, MaxMemoryMiB: cfg.MaxMemoryMiB,
			Kernel: cfg.Kernel, Initrd: initrd, Cmdline: cmdline,
			DiskPath: root.path, DiskFormat: root.format, DiskCache: root.cache, DiskBlock: root.block, SeedPath: seed, Disks: drives,
			SerialSocket: serial, QMPSocket: filepath.Join(cfg.StateDir, qmpSocketName), Filesystems: fs,
		}
		if cfg.Incoming {
			spec.IncomingSocket = filepath.Join(filepath.Dir(cfg.ControlSocket), controlapi.MigrateInSocket)
		}
		if cfg.ResumeFrom != "" {
			spec.IncomingSocket = filepath.Join(cfg.StateDir, resumeSocketName)
		}
		if cfg.GuestAgent {
			spec.AgentSocket = filepath.Join(cfg.StateDir, agentSocketName)
		}
		fw.qemu(&spec)
		var tap *os.File
		if plumbing != nil {
			spec.MAC, tap = plumbing.GuestMAC, plumbing.TapFile
		}
		hv = qemudriver.New(binary, o.Launcher, spec, tap, log).WithKernel(network.kernel)
	case runnerconfig.ProviderCloudHypervisor:
		hv = chdriver.New(binary, cfg, chdriver.Inputs{
			Initrd: initrd, Cmdline: cmdline, Firmware: fw.code, RootPath: root.path, RootFormat: root.format, RootCache: root.cache,
			Disks: drives, Direct: direct, Serial: serial, Seed: seed, APISocket: filepath.Join(cfg.StateDir, chAPISocketName), Plumbing: plumbing,
		}, log)
	}
	mig := newMigration(cfg, hv, board, log)
	if cfg.Incoming {
		defer mig.removeInSockets()
	}
	sus := newSuspender(cfg, hv, mig, board, log)
	agent := newGuestAgent("", hv)
	if cfg.GuestAgent {
		agent = newGuestAgent(filepath.Join(cfg.StateDir, agentSocketName), hv)
	}
	if cfg.ControlSocket != "" {
		ctl := newControlServer(cfg, hv.(hypervisor.Resizer), o.ResizeTimeout, log)
		ctl.mig, ctl.agent, ctl.sus, ctl.board = mig, agent, sus, board
		if stop, err := ctl.serve(cfg.ControlSocket); err != nil && cfg.Incoming {
			return failf(ExitError, "--incoming: no control socket, so no stream can arrive: %v", err)
		} else if err != nil {
			// The guest runs without it: a resize then fails at the node agent, in words.
			log.Error("no control socket: the guest cannot be resized", zap.String("socket", cfg.ControlSocket), zap.Error(err))
		} else {
			defer stop()
			log.Info("control API", zap.String("socket", cfg.ControlSocket), zap.Int32("maxCPUs", cfg.EffectiveMaxCPUs()), zap.Int64("maxMemoryMiB", cfg.EffectiveMaxMemoryMiB()))
		}
	}
	hv = watchShares(hv, shared, log)
	hv, o.Stdout = watchConsole(hv, o.Stdout, cfg.Kernel == "")
	return supervise(ctx, cfg, o, board, hv, guestParts{mig: mig, agent: agent, sus: sus}, filepath.Join(cfg.StateDir, consoleSocketName), serial)
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

// kernelCmdline completes the VM's kernel arguments with what the runner's wiring requires:
// the serial console the runner reads, the virtio root disk, and the pod IP; with hotplugged
// memory, that the kernel onlines it itself, movable while the ratio to boot memory allows, so
// it can be unplugged again (docs/runner.md).
func kernelCmdline(user, ipArg string, hotplugMemory bool) string {
	has := func(key string) bool {
		for _, f := range strings.Fields(user) {
			if f == key || strings.HasPrefix(f, key+"=") {
				return true
			}
		}
		return false
	}
	var parts []string
	if !has("console") {
		parts = append(parts, "console=ttyS0")
	}
	if !has("root") {
		parts = append(parts, "root=/dev/vda")
	}
	// The kernel's check of the IO-APIC timer counts ticks in a wall-clock window; a guest whose
	// vCPU the host starves (TCG on busy cores) misses it and panics ("IO-APIC + timer doesn't
	// work!"). A hypervisor's timer is not the broken hardware the check is for.
	if !has("no_timer_check") {
		parts = append(parts, "no_timer_check")
	}
	if strings.TrimSpace(user) != "" {
		parts = append(parts, strings.TrimSpace(user))
	}
	if ipArg != "" && !has("ip") {
		parts = append(parts, ipArg)
	}
	if hotplugMemory && !has("memhp_default_state") {
		parts = append(parts, "memhp_default_state=online")
		if !has("memory_hotplug.online_policy") {
			parts = append(parts, "memory_hotplug.online_policy=auto-movable")
		}
	}
	return strings.Join(parts, " ")
}
