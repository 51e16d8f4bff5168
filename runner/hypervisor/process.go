package hypervisor

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

// Process runs a hypervisor binary as the runner's child and records how it ended.
type Process struct {
	cmd      *exec.Cmd
	stderr   tailBuffer
	waitDone chan struct{}
	waitErr  error
}

// Start launches the command from a goroutine that keeps its OS thread locked until the child
// exits: Pdeathsig is tied to the thread that forked, and the child must die with the runner.
func (p *Process) Start(cmd *exec.Cmd) error {
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

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.waitDone }

// Succeeded reports whether the process exited with status 0; false while it runs.
func (p *Process) Succeeded() bool { return p.cmd.ProcessState != nil && p.cmd.ProcessState.Success() }

// Detail says how the process named name ended, with the end of its stderr.
func (p *Process) Detail(name string) string {
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

// Kill ends the process at once.
func (p *Process) Kill() {
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
