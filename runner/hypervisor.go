package runner

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

// eventKind is something the runner learns about the guest.
type eventKind int

const (
	eventRunning          eventKind = iota // the guest's vCPUs run
	eventPaused                            // the guest stopped running (an I/O error, a debugger, ...)
	eventShutdown                          // the hypervisor is shutting down; guest says whether the guest asked
	eventPanicked                          // the guest kernel reported a panic
	eventNoBootableDevice                  // the firmware found nothing to boot on the root disk
	eventMigration                         // a live migration changed state; reason is QEMU's status
)

func (k eventKind) String() string {
	return [...]string{"running", "paused", "shutdown", "panicked", "no bootable device", "migration"}[k]
}

type event struct {
	kind   eventKind
	guest  bool   // for eventShutdown: the guest initiated it
	reason string // the hypervisor's own words
}

// hypervisor is one provider's guest. Start launches the hypervisor with the guest not yet
// running, so the runner can attach the console before any output; Resume lets it run. Exited
// is closed when the hypervisor process has exited and every event it sent has been delivered.
type hypervisor interface {
	Start(ctx context.Context) error
	Resume(ctx context.Context) error
	Version() string
	Events() <-chan event
	Powerdown(ctx context.Context) error
	Quit(ctx context.Context) error
	Exited() <-chan struct{}
	// ExitDetail describes how the process ended, with the end of its stderr.
	ExitDetail() string
	// Kill ends the process at once; used when the runner itself fails.
	Kill()
}

// process runs a hypervisor binary as the runner's child and records how it ended.
type process struct {
	cmd      *exec.Cmd
	stderr   tailBuffer
	waitDone chan struct{}
	waitErr  error
}

// start launches the command from a goroutine that keeps its OS thread locked until the child
// exits: Pdeathsig is tied to the thread that forked, and the child must die with the runner.
func (p *process) start(cmd *exec.Cmd) error {
	p.cmd = cmd
	p.waitDone = make(chan struct{})
	cmd.Stderr = &teeWriter{a: os.Stderr, b: &p.stderr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			close(p.waitDone)
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.waitDone)
	}()
	return <-started
}

func (p *process) detail(name string) string {
	state := "exited"
	if p.cmd.ProcessState != nil {
		state = p.cmd.ProcessState.String() // "exit status 1", "signal: killed"
	} else if p.waitErr != nil {
		state = p.waitErr.Error()
	}
	msg := name + " " + state
	if tail := strings.TrimSpace(p.stderr.String()); tail != "" {
		msg += ": " + tail
	}
	return msg
}

func (p *process) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
	}
}

// tailBuffer keeps the last 2 KiB written to it: enough for a hypervisor's last error lines.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = t.b[len(t.b)-2048:]
		if i := bytes.IndexByte(t.b, '\n'); i >= 0 {
			t.b = t.b[i+1:]
		}
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

type teeWriter struct {
	a, b interface{ Write([]byte) (int, error) }
}

func (w *teeWriter) Write(p []byte) (int, error) {
	_, _ = w.a.Write(p)
	return w.b.Write(p)
}
