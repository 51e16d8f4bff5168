package main

import (
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestProbeWait: with --wait the probe keeps asking and passes once the runner answers 200;
// without it, it fails at the first 503 with the runner's reason.
func TestProbeWait(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, "runner.sock"))
	if err != nil {
		t.Fatal(err)
	}
	var startedAt atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if at := startedAt.Load(); at == 0 || time.Now().UnixNano() < at {
			http.Error(w, "the guest is booting", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("started\n"))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	probe := func(args ...string) int {
		code := 0
		c := probeCommand(&code)
		c.SetArgs(append([]string{"--state-dir=" + dir, "--http-addr=unix:runner.sock", "--path=/startedz"}, args...))
		if err := c.Execute(); err != nil {
			t.Fatal(err)
		}
		return code
	}
	startedAt.Store(time.Now().Add(300 * time.Millisecond).UnixNano())
	if code := probe(); code != 1 {
		t.Errorf("a probe without --wait passed while the guest was booting (code %d)", code)
	}
	begin := time.Now()
	if code := probe("--wait=3s"); code != 0 {
		t.Errorf("probe --wait=3s failed though the runner answered 200 after 300 ms (code %d)", code)
	}
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("probe --wait took %v to see the start", took)
	}
	startedAt.Store(time.Now().Add(time.Hour).UnixNano())
	begin = time.Now()
	if code := probe("--wait=400ms"); code != 1 {
		t.Errorf("probe --wait=400ms passed though the guest never started (code %d)", code)
	}
	if took := time.Since(begin); took < 350*time.Millisecond {
		t.Errorf("probe --wait=400ms gave up after %v", took)
	}
}
