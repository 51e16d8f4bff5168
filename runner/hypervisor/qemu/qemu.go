// Package qemu is the runner's QEMU driver: it starts qemu-system-x86_64 with the argv that
// pkg/qemu builds and drives the guest over QMP (qmp.go), for boot and supervision (this file),
// resize (resize.go), live migration (migrate.go), screenshots (screen.go), the guest's
// counters (stats.go) and disk hotplug (hotplug.go).
package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
	"github.com/digitalocean/go-qemu/qmp/raw"
	"go.uber.org/zap"

	qemuargs "github.com/virtpod/virtpod/pkg/qemu"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// VM runs a guest under qemu-system-x86_64 and drives it over QMP on a unix socket.
type VM struct {
	binary   string
	launcher []string // argv prefix that drops capabilities; empty: exec QEMU directly
	spec     qemuargs.Spec
	files    []*os.File // handed to QEMU open from fd 3 (spec names them): the tap, the kernel
	log      *zap.Logger

	proc    hypervisor.Process
	mon     *monitor
	raw     *raw.Monitor
	version string
	events  chan hypervisor.Event
	qmpDone chan struct{} // closed when QMP's event stream ends
	qmpUp   atomic.Bool
	exited  chan struct{}

	ctl      atomic.Pointer[monitor] // QMP for the control API's commands
	resizeMu sync.Mutex
	hotAdded map[string]bool // vCPU ids device_add'ed at run time
	sendMu   sync.Mutex
	cur      *send    // the latest migration from here (mirror.go)
	exports  []string // drives a waiting target serves over NBD
	hot      slots    // the disks on hotplug slots (hotplug.go)

	// unplugged: a vCPU was removed. QEMU 7.2's multi-threaded TCG then crashed (SIGSEGV in
	// malloc) on the next device_add of any vCPU, and single-threaded TCG aborts on unplug
	// (measured, docs/runner.md), so under tcg no vCPU is added after one was removed.
	unplugged bool
}

// New prepares QEMU's guest m; Start launches it. launcher is an argv prefix put in front of
// binary (empty: exec QEMU directly).
func New(binary string, launcher []string, m hypervisor.Machine, log *zap.Logger) *VM {
	spec, files := spec(m)
	q := &VM{binary: binary, launcher: launcher, spec: spec, files: files, log: log, events: make(chan hypervisor.Event, 64), qmpDone: make(chan struct{}), exited: make(chan struct{}), hotAdded: map[string]bool{}}
	q.hot.init(spec.Disks)
	return q
}

func (q *VM) Version() string                 { return q.version }
func (q *VM) Events() <-chan hypervisor.Event { return q.events }
func (q *VM) Exited() <-chan struct{}         { return q.exited }
func (q *VM) ExitDetail() string              { return q.proc.Detail(binaries.QEMUName) }
func (q *VM) Kill()                           { q.proc.Kill() }
func (q *VM) Powerdown(context.Context) error { return q.raw.SystemPowerdown() }

// Quit stops QEMU at once (QMP quit), and kills it if QMP does not answer.
func (q *VM) Quit(context.Context) error {
	if q.raw != nil {
		if err := q.raw.Quit(); err == nil {
			return nil
		}
	}
	q.proc.Kill()
	return nil
}

// Start launches QEMU paused, connects QMP and subscribes to its events, then resumes the
// guest: starting paused means no event and no console output is missed.
func (q *VM) Start(ctx context.Context) error {
	spec := q.spec
	args, err := qemuargs.Args(spec)
	if err != nil {
		return err
	}
	for _, p := range []string{spec.QMPSocket, spec.SerialSocket, spec.IncomingSocket, spec.VNCSocket} {
		if p == "" {
			continue
		}
		_ = os.Remove(p)
	}
	argv := append(append(append([]string{}, q.launcher...), q.binary), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.ExtraFiles = q.files
	q.log.Info("starting qemu", zap.String("binary", q.binary), zap.Strings("args", args))
	if err := q.proc.Start(cmd); err != nil {
		return fmt.Errorf("start %s: %w", q.binary, err)
	}
	go q.waitExit()

	if err := q.connectQMP(ctx); err != nil {
		return err
	}
	return nil
}

// Resume lets the paused guest run; the console must be attached first.
func (q *VM) Resume(context.Context) error {
	if err := q.raw.Cont(); err != nil {
		return fmt.Errorf("QMP cont: %w", err)
	}
	st, err := q.raw.QueryStatus()
	if err != nil {
		return fmt.Errorf("QMP query-status: %w", err)
	}
	if st.Status == raw.RunStateRunning {
		q.events <- hypervisor.Event{Kind: hypervisor.EventRunning, Reason: "query-status running"}
	}
	return nil
}

func (q *VM) connectQMP(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var lastErr error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			// QEMU creates the socket within tens of milliseconds; poll finely, as every
			// millisecond here adds to the guest's boot.
			select {
			case <-q.proc.Done():
				return fmt.Errorf("qemu exited before QMP was ready: %s", q.proc.Detail(binaries.QEMUName))
			case <-ctx.Done():
				return fmt.Errorf("QMP socket %s not ready: %w (last error: %v)", q.spec.QMPSocket, ctx.Err(), lastErr)
			case <-time.After(5 * time.Millisecond):
			}
		}
		mon, err := dialMonitor(q.spec.QMPSocket, 2*time.Second)
		if err != nil {
			lastErr = err
			continue
		}
		q.mon, q.raw = mon, raw.NewMonitor(mon)
		q.version = mon.version.String()
		evs, err := mon.Events(context.Background())
		if err != nil {
			return fmt.Errorf("QMP events: %w", err)
		}
		q.qmpUp.Store(true)
		q.ctl.Store(mon)
		go q.translate(evs)
		return nil
	}
}

// translate turns QMP events into the runner's events. It must keep reading: the monitor's
// reader waits on an unread event, which would also hold back command replies.
func (q *VM) translate(evs <-chan qmp.Event) {
	defer close(q.qmpDone)
	for e := range evs {
		q.log.Debug("qmp event", zap.String("event", e.Event), zap.Any("data", e.Data))
		switch e.Event {
		case "RESUME":
			q.events <- hypervisor.Event{Kind: hypervisor.EventRunning, Reason: "RESUME"}
		case "STOP":
			q.events <- hypervisor.Event{Kind: hypervisor.EventPaused, Reason: "STOP"}
		case "SHUTDOWN":
			guest, _ := e.Data["guest"].(bool)
			reason, _ := e.Data["reason"].(string)
			q.events <- hypervisor.Event{Kind: hypervisor.EventShutdown, Guest: guest, Reason: reason}
		case "MIGRATION":
			status, _ := e.Data["status"].(string)
			q.migrationEvent(status)
			q.events <- hypervisor.Event{Kind: hypervisor.EventMigration, Reason: status}
		case "DEVICE_DELETED": // a device the guest released; a hotplug detach waits for it
			if id, _ := e.Data["device"].(string); id != "" {
				q.hot.deleted(id)
			}
		case "GUEST_PANICKED":
			action, _ := e.Data["action"].(string)
			q.events <- hypervisor.Event{Kind: hypervisor.EventPanicked, Reason: "GUEST_PANICKED action=" + action}
		}
	}
}

// waitExit closes exited once QEMU has exited and the QMP stream has drained, so the SHUTDOWN
// event that explains a clean exit is always seen before the exit.
func (q *VM) waitExit() {
	<-q.proc.Done()
	if q.qmpUp.Load() {
		// QEMU's end closes the socket, which ends the stream after its last event.
		select {
		case <-q.qmpDone:
		case <-time.After(2 * time.Second):
		}
	}
	close(q.exited)
}

var _ hypervisor.Hypervisor = (*VM)(nil)
