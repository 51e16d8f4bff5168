package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// component is one long-running process of the cluster.
type component struct {
	name string
	bin  string
	args []string
	env  []string
	// ready reports nil once the component serves.
	ready func(ctx context.Context) error
}

// start runs the component in its own session, so it outlives `up`, with its output in the log
// folder and its pid in the pid folder, and waits until it is ready.
func (c *cluster) start(ctx context.Context, comp component) error {
	if pid, ok := c.alive(comp.name); ok {
		fmt.Printf("  %-24s already running (pid %d)\n", comp.name, pid)
		return nil
	}
	if _, err := os.Stat(comp.bin); err != nil {
		return fmt.Errorf("%s: binary %s missing; run `make cluster-binaries`", comp.name, comp.bin)
	}
	logPath := c.path("logs", comp.name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(comp.bin, comp.args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), comp.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", comp.name, err)
	}
	pid := cmd.Process.Pid
	if err := writeFile(c.path("pids", comp.name+".pid"), strconv.Itoa(pid), 0o644); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("%s exited during start-up (%v); its log: %s\n%s", comp.name, err, logPath, tail(logPath, 15))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after 90s; its log: %s\n%s", comp.name, logPath, tail(logPath, 15))
		case <-time.After(250 * time.Millisecond):
		}
		if err := comp.ready(ctx); err == nil {
			fmt.Printf("  %-24s ready in %.1fs (pid %d)\n", comp.name, time.Since(begin).Seconds(), pid)
			return nil
		}
	}
}

// alive reports the component's pid when its pid file names a live process.
func (c *cluster) alive(name string) (int, bool) {
	b, err := os.ReadFile(c.path("pids", name+".pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if syscall.Kill(pid, 0) != nil {
		return 0, false
	}
	// A reused pid would belong to another program.
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return pid, strings.Contains(exe, filepath.Base(c.binFor(name)))
}

// stop sends SIGTERM, waits, then SIGKILL.
func (c *cluster) stop(name string) error {
	pid, ok := c.alive(name)
	defer os.Remove(c.path("pids", name+".pid"))
	if !ok {
		return nil
	}
	return killWait(pid, 15*time.Second)
}

func killWait(pid int, grace time.Duration) error {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil || zombie(pid) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}
