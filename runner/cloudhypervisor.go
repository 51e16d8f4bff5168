package runner

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/cloudhypervisor"
	"github.com/virtpod/virtpod/pkg/diskimage"
	"github.com/virtpod/virtpod/pkg/guestnet"
	"github.com/virtpod/virtpod/pkg/qemu"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/binaries"
)

type cloudHypervisorInputs struct {
	initrd, cmdline, serial, apiSocket string
	firmware                           string // without a kernel: the UEFI firmware the disk boots through
	seed                               string // cloud-init seed image; "" for none
	root                               rootDisk
	disks                              []qemu.Drive // data disks, as the QEMU builder takes them
	direct                             bool         // the state directory (the seed's) takes O_DIRECT
	plumbing                           *guestnet.Plumbing
}

// chVM runs a guest under cloud-hypervisor through its REST API. cloud-hypervisor has no event
// stream on its API socket, so the guest's state is polled from vm.info. It needs a host with
// cloud-hypervisor and KVM; on this project's test machines only its builder and client are
// exercised (against a server that follows the published API).
type chVM struct {
	binary  string
	cfg     runnerconfig.Config
	in      cloudHypervisorInputs
	log     *zap.Logger
	client  *cloudhypervisor.Client
	proc    process
	version string
	events  chan event
	exited  chan struct{}
}

func newCloudHypervisor(binary string, cfg runnerconfig.Config, in cloudHypervisorInputs, log *zap.Logger) *chVM {
	return &chVM{binary: binary, cfg: cfg, in: in, log: log, client: cloudhypervisor.NewClient(in.apiSocket),
		events: make(chan event, 64), exited: make(chan struct{})}
}

func (c *chVM) Version() string         { return c.version }
func (c *chVM) Events() <-chan event    { return c.events }
func (c *chVM) Exited() <-chan struct{} { return c.exited }
func (c *chVM) ExitDetail() string      { return c.proc.detail(binaries.CloudHypervisorName) }
func (c *chVM) Kill()                   { c.proc.kill() }

func (c *chVM) Powerdown(ctx context.Context) error { return c.client.PowerButton(ctx) }

func (c *chVM) Quit(ctx context.Context) error {
	if err := c.client.ShutdownVMM(ctx); err != nil {
		c.proc.kill()
	}
	return nil
}

// Start launches cloud-hypervisor with only its API socket and creates (not boots) the VM.
func (c *chVM) Start(ctx context.Context) error {
	spec := cloudhypervisor.Spec{
		CPUs: c.cfg.CPUs, MemoryMiB: c.cfg.MemoryMiB, MaxCPUs: c.cfg.MaxCPUs, MaxMemoryMiB: c.cfg.MaxMemoryMiB, Kernel: c.cfg.Kernel, Initrd: c.in.initrd, Cmdline: c.in.cmdline, Firmware: c.in.firmware,
		DiskPath: c.in.root.path, DiskFormat: c.in.root.format, DirectIO: c.in.direct && c.in.root.cache == qemu.CacheNone, SerialSocket: c.in.serial,
		SeedPath: c.in.seed,
	}
	for _, d := range c.in.disks {
		spec.Disks = append(spec.Disks, cloudhypervisor.DataDisk{Serial: d.Serial, Path: d.Path, Qcow2: d.Format == diskimage.FormatQCOW2,
			ReadOnly: d.ReadOnly, DirectIO: d.Cache == qemu.CacheNone})
	}
	if p := c.in.plumbing; p != nil {
		spec.TapName, spec.MAC, spec.MTU = p.Tap, p.GuestMAC, p.Pod.MTU
	}
	vmcfg, err := cloudhypervisor.Build(spec)
	if err != nil {
		return err
	}
	_ = os.Remove(c.in.apiSocket)
	cmd := exec.Command(c.binary, cloudhypervisor.Args(c.in.apiSocket)...)
	if err := c.proc.start(cmd); err != nil {
		return fmt.Errorf("start %s: %w", c.binary, err)
	}
	go func() {
		<-c.proc.waitDone
		// cloud-hypervisor exits 0 when the guest powers off.
		if c.proc.cmd.ProcessState != nil && c.proc.cmd.ProcessState.Success() {
			c.events <- event{kind: eventShutdown, guest: true, reason: "cloud-hypervisor exited 0"}
		}
		close(c.exited)
	}()
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		ping, err := c.client.Ping(pctx)
		if err == nil {
			c.version = ping.Version
			break
		}
		select {
		case <-c.exited:
			return fmt.Errorf("cloud-hypervisor exited before its API was ready: %s", c.ExitDetail())
		case <-pctx.Done():
			return fmt.Errorf("cloud-hypervisor API %s not ready: %w", c.in.apiSocket, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return c.client.Create(ctx, vmcfg)
}

// Resume boots the created VM and starts polling its state.
func (c *chVM) Resume(ctx context.Context) error {
	if err := c.client.Boot(ctx); err != nil {
		return err
	}
	go c.poll()
	return nil
}

func (c *chVM) poll() {
	last := ""
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		info, err := c.client.Info(context.Background())
		if err == nil && info.State != last {
			last = info.State
			switch info.State {
			case cloudhypervisor.StateRunning:
				c.events <- event{kind: eventRunning, reason: info.State}
			case cloudhypervisor.StatePaused:
				c.events <- event{kind: eventPaused, reason: info.State}
			}
		}
		select {
		case <-c.exited:
			return
		case <-t.C:
		}
	}
}

var _ hypervisor = (*chVM)(nil)
