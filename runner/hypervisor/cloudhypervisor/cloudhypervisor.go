// Package cloudhypervisor is the runner's cloud-hypervisor driver: it starts cloud-hypervisor
// with only its API socket and creates, boots, resizes and stops the VM through the REST API
// that pkg/cloudhypervisor speaks. It cannot migrate a guest.
package cloudhypervisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"go.uber.org/zap"

	chapi "github.com/virtpod/virtpod/pkg/cloudhypervisor"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// VM runs a guest under cloud-hypervisor through its REST API. cloud-hypervisor has no event
// stream on its API socket, so the guest's state is polled from vm.info. It needs a host with
// cloud-hypervisor and KVM; on this project's test machines only its builder and client are
// exercised (against a server that follows the published API).
type VM struct {
	binary  string
	m       hypervisor.Machine
	log     *zap.Logger
	client  *chapi.Client
	proc    hypervisor.Process
	version string
	events  chan hypervisor.Event
	exited  chan struct{}
}

// New prepares the guest m; Start launches cloud-hypervisor with its API on m's control socket.
func New(binary string, m hypervisor.Machine, log *zap.Logger) *VM {
	return &VM{binary: binary, m: m, log: log, client: chapi.NewClient(m.Sockets.Control),
		events: make(chan hypervisor.Event, 64), exited: make(chan struct{})}
}

func (c *VM) Version() string                 { return c.version }
func (c *VM) Events() <-chan hypervisor.Event { return c.events }
func (c *VM) Exited() <-chan struct{}         { return c.exited }
func (c *VM) ExitDetail() string              { return c.proc.Detail(binaries.CloudHypervisorName) }
func (c *VM) Kill()                           { c.proc.Kill() }

func (c *VM) Powerdown(ctx context.Context) error { return c.client.PowerButton(ctx) }

func (c *VM) Quit(ctx context.Context) error {
	if err := c.client.ShutdownVMM(ctx); err != nil {
		c.proc.Kill()
	}
	return nil
}

// Start launches cloud-hypervisor with only its API socket and creates (not boots) the VM.
func (c *VM) Start(ctx context.Context) error {
	vmcfg, err := chapi.Build(spec(c.m))
	if err != nil {
		return err
	}
	_ = os.Remove(c.m.Sockets.Control)
	cmd := exec.Command(c.binary, chapi.Args(c.m.Sockets.Control)...)
	if err := c.proc.Start(cmd); err != nil {
		return fmt.Errorf("start %s: %w", c.binary, err)
	}
	go func() {
		<-c.proc.Done()
		// cloud-hypervisor exits 0 when the guest powers off.
		if c.proc.Succeeded() {
			c.events <- hypervisor.Event{Kind: hypervisor.EventShutdown, Guest: true, Reason: "cloud-hypervisor exited 0"}
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
			return fmt.Errorf("cloud-hypervisor API %s not ready: %w", c.m.Sockets.Control, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return c.client.Create(ctx, vmcfg)
}

// Resume boots the created VM and starts polling its state.
func (c *VM) Resume(ctx context.Context) error {
	if err := c.client.Boot(ctx); err != nil {
		return err
	}
	go c.poll()
	return nil
}

func (c *VM) poll() {
	last := ""
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		info, err := c.client.Info(context.Background())
		if err == nil && info.State != last {
			last = info.State
			switch info.State {
			case chapi.StateRunning:
				c.events <- hypervisor.Event{Kind: hypervisor.EventRunning, Reason: info.State}
			case chapi.StatePaused:
				c.events <- hypervisor.Event{Kind: hypervisor.EventPaused, Reason: info.State}
			}
		}
		select {
		case <-c.exited:
			return
		case <-t.C:
		}
	}
}

var _ hypervisor.Hypervisor = (*VM)(nil)
