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
	"github.com/virtpod/virtpod/pkg/disk/diskfile"
	"github.com/virtpod/virtpod/pkg/disk/diskimage"
	"github.com/virtpod/virtpod/pkg/qemu"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
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
	binary, missing := checkBinaries(cfg, o)
	if missing != nil {
		return *missing
	}
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		return failf(ExitError, "--state-dir: %v", err)
	}
	stopHTTP, err := board.serve(runnerconfig.HTTPEndpoint(cfg.HTTPAddr, cfg.StateDir))
	if err != nil {
		return failf(ExitError, "--http-addr: %v", err)
	}
	defer stopHTTP()
	if failed := probeKVM(ctx, cfg, o); failed != nil {
		return *failed
	}

	in := guestInputs{serial: filepath.Join(cfg.StateDir, serialSocketName)}
	if failed := in.bootFiles(cfg, log); failed != nil {
		return *failed
	}
	bz, bzSize := openBzImage(cfg)
	if bz != nil {
		defer bz.Close()
	}
	if failed := in.rootDisk(ctx, &cfg, o, board, log); failed != nil {
		return *failed
	}
	drives, cleanDisks, err := prepareDisks(cfg, log)
	if err != nil {
		return failf(ExitError, "%v", err)
	}
	defer cleanDisks()
	in.drives = drives
	if in.seed, err = writeSeed(cfg); err != nil {
		return failf(ExitError, "cloud-init seed: %v", err)
	}
	if in.seed != "" {
		// The image holds the Secret's data on the node's disk: gone when the guest is.
		defer os.Remove(in.seed)
		log.Info("cloud-init seed", zap.String("image", in.seed), zap.String("instanceID", cfg.InstanceID), zap.Bool("networkConfig", cfg.CloudInitNetworkData != ""))
	}

	network, err := setupNetwork(ctx, cfg, o, board, bz)
	if err != nil {
		return failf(ExitError, "--network=%s: %v", cfg.Network, err)
	}
	defer network.close()
	logKernel(cfg, bzSize, network, log)
	in.network = network
	if cfg.Kernel != "" {
		in.cmdline = kernelCmdline(cfg.KernelArgs, network.ipArg, cfg.MaxMemoryMiB > cfg.MemoryMiB)
	}
	shared, fs, err := startShares(cfg, o, log)
	if err != nil {
		return failf(ExitError, "%v", err)
	}
	defer shared.stop()
	in.filesystems = fs

	hv := newHypervisor(binary, cfg, o, in, log)
	mig := newMigration(cfg, hv, board, log)
	if cfg.Incoming {
		defer mig.removeInSockets()
	}
	parts := guestParts{mig: mig, sus: newSuspender(cfg, hv, mig, board, log), agent: newGuestAgent("", hv)}
	if cfg.GuestAgent {
		parts.agent = newGuestAgent(filepath.Join(cfg.StateDir, agentSocketName), hv)
	}
	stopControl, failed := serveControl(cfg, o, hv, parts, board, log)
	if failed != nil {
		return *failed
	}
	defer stopControl()
	hv = watchShares(hv, shared, log)
	hv, o.Stdout = watchConsole(hv, o.Stdout, cfg.Kernel == "")
	return supervise(ctx, cfg, o, board, hv, parts, filepath.Join(cfg.StateDir, consoleSocketName), in.serial)
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

// guestInputs are what the runner prepared for the hypervisor: the boot files, the disks, the
// network and the shares, in the runner's words, which each driver translates.
type guestInputs struct {
	fw          firmwareFiles
	initrd      string
	cmdline     string
	root        rootDisk
	direct      bool // the state directory takes O_DIRECT
	drives      []qemu.Drive
	seed        string
	serial      string
	network     *guestNetwork
	filesystems []qemu.Filesystem
}

// bootFiles are the guest's boot: its kernel (and an initrd, when the file is there), or the
// firmware that boots its root disk.
func (in *guestInputs) bootFiles(cfg runnerconfig.Config, log *zap.Logger) *Outcome {
	if cfg.Kernel == "" {
		fw, err := prepareFirmware(cfg)
		if err != nil {
			out := failf(ExitError, "--firmware=%s: %v", cfg.Firmware, err)
			return &out
		}
		in.fw = fw
		log.Info("booting the root disk through firmware", zap.String("firmware", fw.kind), zap.String("code", fw.code), zap.String("vars", fw.vars))
	} else if _, err := os.Stat(cfg.Kernel); err != nil {
		out := failf(ExitError, "--kernel: %v", err)
		return &out
	}
	in.initrd = cfg.Initrd
	if in.initrd != "" {
		if _, err := os.Stat(in.initrd); err != nil {
			log.Info("no initrd; booting without one", zap.String("initrd", in.initrd))
			in.initrd = ""
		}
	}
	return nil
}

// rootDisk readies the root disk: a volume kept on a claim, or an overlay in the state
// directory on the image's disk. --root-disk names the disk, or the VM image's /disk, which
// holds it as root.img or as a containerDisk's one disk file (resolved into cfg); with a root
// volume it is what fills the volume once.
func (in *guestInputs) rootDisk(ctx context.Context, cfg *runnerconfig.Config, o Options, board *statusBoard, log *zap.Logger) *Outcome {
	if cfg.RootDisk != "" {
		base, _, err := diskfile.Resolve(cfg.RootDisk)
		if err != nil {
			out := failf(ExitRootDiskUnusable, "root disk: %v", err)
			return &out
		}
		cfg.RootDisk = base
	}
	in.direct = diskimage.SupportsDirectIO(cfg.StateDir)
	in.root = rootDisk{cache: qemu.CacheWriteback}
	if in.direct {
		in.root.cache = qemu.CacheNone
	}
	if cfg.RootVolume != nil {
		root, err := prepareRootVolume(ctx, *cfg, o.QEMUImgBinary, board, log)
		if err != nil {
			out := failf(ExitError, "%v", err)
			return &out
		}
		in.root = root
		return nil
	}
	overlay, err := diskimage.CreateOverlay(ctx, o.QEMUImgBinary, cfg.RootDisk, filepath.Join(cfg.StateDir, overlayName), cfg.DiskSizeMiB)
	if err != nil {
		out := failf(ExitError, "%v", err)
		return &out
	}
	log.Info("root disk", zap.String("overlay", overlay.Path), zap.String("base", overlay.Base), zap.String("baseFormat", overlay.BaseFormat), zap.Int64("sizeBytes", overlay.SizeBytes), zap.Bool("reused", overlay.Reused))
	in.root.path, in.root.format = overlay.Path, overlay.Format
	return nil
}

// newHypervisor is the driver of cfg's provider, given what the runner prepared.
func newHypervisor(binary string, cfg runnerconfig.Config, o Options, in guestInputs, log *zap.Logger) hypervisor.Hypervisor {
	plumbing := in.network.plumbing
	if cfg.Provider == runnerconfig.ProviderCloudHypervisor {
		return chdriver.New(binary, cfg, chdriver.Inputs{
			Initrd: in.initrd, Cmdline: in.cmdline, Firmware: in.fw.code, RootPath: in.root.path, RootFormat: in.root.format, RootCache: in.root.cache,
			Disks: in.drives, Direct: in.direct, Serial: in.serial, Seed: in.seed, APISocket: filepath.Join(cfg.StateDir, chAPISocketName), Plumbing: plumbing,
		}, log)
	}
	spec := qemu.Spec{
		Name: cfg.Name, Acceleration: cfg.Acceleration, Machine: cfg.Machine, CPUModel: o.CPUModel, CPUs: cfg.CPUs, MemoryMiB: cfg.MemoryMiB,
		MaxCPUs: cfg.MaxCPUs, MaxMemoryMiB: cfg.MaxMemoryMiB,
		Kernel: cfg.Kernel, Initrd: in.initrd, Cmdline: in.cmdline,
		DiskPath: in.root.path, DiskFormat: in.root.format, DiskCache: in.root.cache, DiskBlock: in.root.block, SeedPath: in.seed, Disks: in.drives,
		SerialSocket: in.serial, QMPSocket: filepath.Join(cfg.StateDir, qmpSocketName), Filesystems: in.filesystems,
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
	in.fw.qemu(&spec)
	var tap *os.File
	if plumbing != nil {
		spec.MAC, tap = plumbing.GuestMAC, plumbing.TapFile
	}
	return qemudriver.New(binary, o.Launcher, spec, tap, log).WithKernel(in.network.kernel)
}

// serveControl serves the control API on cfg's control socket, if it names one. A target
// without it is the run's outcome (no stream could arrive); any other guest runs without it,
// and a resize then fails at the node agent, in words.
func serveControl(cfg runnerconfig.Config, o Options, hv hypervisor.Hypervisor, parts guestParts, board *statusBoard, log *zap.Logger) (func(), *Outcome) {
	if cfg.ControlSocket == "" {
		return func() {}, nil
	}
	ctl := newControlServer(cfg, hv.(hypervisor.Resizer), o.ResizeTimeout, log)
	ctl.mig, ctl.agent, ctl.sus, ctl.board = parts.mig, parts.agent, parts.sus, board
	stop, err := ctl.serve(cfg.ControlSocket)
	switch {
	case err != nil && cfg.Incoming:
		out := failf(ExitError, "--incoming: no control socket, so no stream can arrive: %v", err)
		return nil, &out
	case err != nil:
		log.Error("no control socket: the guest cannot be resized", zap.String("socket", cfg.ControlSocket), zap.Error(err))
		return func() {}, nil
	}
	log.Info("control API", zap.String("socket", cfg.ControlSocket), zap.Int32("maxCPUs", cfg.EffectiveMaxCPUs()), zap.Int64("maxMemoryMiB", cfg.EffectiveMaxMemoryMiB()))
	return stop, nil
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
