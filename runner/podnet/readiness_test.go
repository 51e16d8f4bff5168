package podnet

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/status"
)

// listen returns a loopback port that answers with handler (nil: accepts connections and never
// answers), closed with the test.
func listen(t *testing.T, handler http.Handler) int32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if handler != nil {
		srv := &http.Server{Handler: handler}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { srv.Close() })
	} else {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() }) // holds the connection open, silent
			}
		}()
	}
	return int32(l.Addr().(*net.TCPAddr).Port)
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return int32(p)
}

func answering(code int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || r.URL.RawQuery != "deep=1" {
			http.NotFound(w, r)
			return
		}
		if code == http.StatusFound {
			http.Redirect(w, r, "http://192.0.2.1/elsewhere", code) // not followed
			return
		}
		w.WriteHeader(code)
	})
}

// TestGuestProbeChecks runs each kind of check against real listeners.
func TestGuestProbeChecks(t *testing.T) {
	ok := listen(t, answering(http.StatusOK))
	for _, tc := range []struct {
		name  string
		probe runnerconfig.Probe
		want  string // "" passes
	}{
		{"tcp open", runnerconfig.Probe{Kind: "tcp", Port: ok}, ""},
		{"tcp closed", runnerconfig.Probe{Kind: "tcp", Port: closedPort(t)}, "connection refused"},
		{"http 200", runnerconfig.Probe{Kind: "http", Port: ok, Path: "/healthz?deep=1"}, ""},
		{"http 302", runnerconfig.Probe{Kind: "http", Port: listen(t, answering(http.StatusFound)), Path: "/healthz?deep=1"}, ""},
		{"http 404", runnerconfig.Probe{Kind: "http", Port: ok, Path: "/other"}, "answered 404 Not Found"},
		{"http 503", runnerconfig.Probe{Kind: "http", Port: listen(t, answering(http.StatusServiceUnavailable)), Path: "/healthz?deep=1"}, "answered 503 Service Unavailable"},
		{"http closed", runnerconfig.Probe{Kind: "http", Port: closedPort(t), Path: "/"}, "connection refused"},
		{"http silent", runnerconfig.Probe{Kind: "http", Port: listen(t, nil), Path: "/"}, "no answer within 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewProbe(tc.probe, net.IPv4(127, 0, 0, 1), nil, zap.NewNop())
			start := time.Now()
			err := g.check(context.Background())
			if took := time.Since(start); took > probeTimeout+500*time.Millisecond {
				t.Errorf("check took %v, more than its timeout", took)
			}
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
				t.Fatalf("check: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestReadyzWithProbe: /readyz is 200 only while the guest runs and its probe's last check
// passed, with the probe's one-line reason otherwise; /status shows the probe.
func TestReadyzWithProbe(t *testing.T) {
	b := status.New("qemu", "tcg")
	b.Set(status.StateRunning, "")
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Fatalf("no probe, running: %d", code)
	}

	port := listen(t, answering(http.StatusOK))
	closed := closedPort(t)
	g := NewProbe(runnerconfig.Probe{Kind: "http", Port: port, Path: "/healthz?deep=1"}, net.IPv4(127, 0, 0, 1), nil, zap.NewNop())
	b.SetProbe(g)
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || body != "guest readiness probe http :"+strconv.Itoa(int(port))+"/healthz?deep=1: no check has run yet\n" {
		t.Errorf("before the first check: %d %q", code, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.Run(ctx)
	waitFor(t, func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	_, body := get("/status")
	var st status.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.ReadinessProbe == nil || !st.ReadinessProbe.Passed ||
		st.ReadinessProbe.Probe != "http:"+strconv.Itoa(int(port))+"/healthz?deep=1" || st.ReadinessProbe.LastChecked.IsZero() {
		t.Errorf("/status %s: %v", body, err)
	}

	// Not running: the guest's state comes first.
	b.Set(status.StatePaused, "")
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || body != "guest is paused\n" {
		t.Errorf("paused: %d %q", code, body)
	}
	b.Set(status.StateRunning, "")

	// A failing probe, checked by the same loop.
	cancel()
	g2 := NewProbe(runnerconfig.Probe{Kind: "tcp", Port: closed}, net.IPv4(127, 0, 0, 1), nil, zap.NewNop())
	b.SetProbe(g2)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go g2.Run(ctx2)
	want := "guest readiness probe tcp :" + strconv.Itoa(int(closed)) + ": connection refused\n"
	waitFor(t, func() bool { _, body := get("/readyz"); return body == want })
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("failing probe: %d", code)
	}
	waitFor(t, func() bool { return g2.Status().ConsecutiveFailures >= 2 }) // it keeps checking
	_, body = get("/status")
	if !strings.Contains(body, `"passed":false`) || !strings.Contains(body, `"message":"connection refused"`) {
		t.Errorf("/status %s", body)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
