package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// TestBridge: what stdin sends reaches the display's socket, what the display answers reaches
// stdout, and the end of stdin ends the session once the display has answered.
func TestBridge(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("unix", hypervisor.VNCSocket(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("RFB 003.008\n"))
		got, _ := io.ReadAll(c) // until the client's half close
		_, _ = c.Write(append([]byte("got "), got...))
	}()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- bridge(hypervisor.VNCSocket(dir), strings.NewReader("RFB 003.008\n"), &out) }()
	select {
	case err := <-done:
		if err != nil || out.String() != "RFB 003.008\ngot RFB 003.008\n" {
			t.Fatalf("bridge: %v, out %q", err, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the bridge did not end with its stdin")
	}
	if err := bridge(filepath.Join(dir, "none.sock"), strings.NewReader(""), io.Discard); err == nil || !strings.Contains(err.Error(), "the guest has no display") {
		t.Errorf("no socket: %v", err)
	}
}

// TestScreenshotCommand writes the control API's PNG to stdout, and an error answer's reason.
func TestScreenshotCommand(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "runner.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var noDisplay atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+controlapi.ScreenshotPath, func(w http.ResponseWriter, _ *http.Request) {
		if noDisplay.Load() {
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":"the guest has no display (--display=none)"}`))
			return
		}
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write([]byte("\x89PNG..."))
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	var out bytes.Buffer
	if err := screenshot(sock, &out); err != nil || out.String() != "\x89PNG..." {
		t.Fatalf("screenshot: %v, %q", err, out.String())
	}
	noDisplay.Store(true)
	if err := screenshot(sock, io.Discard); err == nil || err.Error() != "screenshot: 409 Conflict: the guest has no display (--display=none)" {
		t.Errorf("no display: %v", err)
	}
}
