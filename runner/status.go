package runner

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Guest states reported by /status.
const (
	StatePreparing = "preparing"
	StateStarting  = "starting"
	StateRunning   = "running"
	StatePaused    = "paused"
	StateStopping  = "stopping"
	StateStopped   = "stopped"
	StateFailed    = "failed"
	// StateIncoming: a migration target waiting for its guest; StateMigrated: a source whose
	// guest now runs in another pod, kept paused here until the pod is deleted.
	StateIncoming = "incoming"
	StateMigrated = "migrated"
)

// Status is the /status document.
type Status struct {
	State         string  `json:"state"`
	Hypervisor    string  `json:"hypervisor"`
	Version       string  `json:"version"`
	Acceleration  string  `json:"acceleration"`
	UptimeSeconds float64 `json:"uptimeSeconds"`
	Reason        string  `json:"reason,omitempty"`
	// SpoofDropped counts the frames the guest sent as someone else (by counter: mac, arp, ip,
	// other), dropped on its tap; absent when the guest has no pod network.
	SpoofDropped map[string]uint64 `json:"spoofDropped,omitempty"`
	// ReadinessProbe is the guest readiness probe's last result; absent without one.
	ReadinessProbe *ProbeStatus `json:"readinessProbe,omitempty"`
}

type statusBoard struct {
	mu      sync.Mutex
	s       Status
	running time.Time // when the guest last started running
	// dropped reads the anti-spoofing counters; nil until the guard is installed.
	dropped func() (map[string]uint64, error)
	// probe is the guest readiness probe; nil without one.
	probe *guestProbe
}

func (b *statusBoard) set(state, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if state == StateRunning && b.s.State != StateRunning {
		b.running = time.Now()
	}
	b.s.State, b.s.Reason = state, reason
}

func (b *statusBoard) setVersion(v string) {
	b.mu.Lock()
	b.s.Version = v
	b.mu.Unlock()
}

func (b *statusBoard) get() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.s
	if !b.running.IsZero() {
		s.UptimeSeconds = time.Since(b.running).Round(time.Millisecond).Seconds()
	}
	return s
}

// handler serves read-only views: GET (and HEAD) only, so nothing on the endpoint can change the
// runner or the guest; stopping the guest is the pod's deletion, through the kubelet.
func (b *statusBoard) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	// /startedz: the guest runs (the pod's startup probe: the VM's phase Running).
	mux.HandleFunc("GET /startedz", func(w http.ResponseWriter, _ *http.Request) {
		if st := b.get().State; st != StateRunning {
			http.Error(w, "guest is "+st, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if st := b.get().State; st != StateRunning {
			http.Error(w, "guest is "+st, http.StatusServiceUnavailable)
			return
		}
		// Running is not ready when the VM asked for more: its probe must have passed too.
		if p := b.guestProbe(); p != nil {
			if msg := p.notReady(); msg != "" {
				http.Error(w, msg, http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		s := b.get()
		s.SpoofDropped = b.spoofDropped()
		if p := b.guestProbe(); p != nil {
			ps := p.status()
			s.ReadinessProbe = &ps
		}
		_ = json.NewEncoder(w).Encode(s)
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(dropCollector{b})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// serve listens on addr (a runnerconfig.HTTPEndpoint) and serves until the returned function
// is called; the listener is open when it returns.
func (b *statusBoard) serve(network, addr string) (func(), error) {
	if network == "unix" {
		_ = os.Remove(addr) // left by an earlier runner in the same pod
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: b.handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the runner's own outcome matters more than a late HTTP error
		}
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}

// spoofDropped reads the anti-spoofing counters from the kernel, outside the board's lock, and
// only for /status and /metrics: the kubelet's readiness probe needs none of it. nil before the
// guard is installed, or when the read fails (the field is left out, never the document).
func (b *statusBoard) spoofDropped() map[string]uint64 {
	b.mu.Lock()
	read := b.dropped
	b.mu.Unlock()
	if read == nil {
		return nil
	}
	m, err := read()
	if err != nil {
		return nil
	}
	return m
}

func (b *statusBoard) setProbe(p *guestProbe) {
	b.mu.Lock()
	b.probe = p
	b.mu.Unlock()
}

func (b *statusBoard) guestProbe() *guestProbe {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.probe
}

func (b *statusBoard) setDropped(f func() (map[string]uint64, error)) {
	b.mu.Lock()
	b.dropped = f
	b.mu.Unlock()
}

var spoofDroppedDesc = prometheus.NewDesc("virtpod_runner_spoofed_frames_dropped_total",
	"Frames the guest sent with a source other than its own MAC and the pod IP, dropped on its tap, by counter (mac, arp, ip, other).",
	[]string{"counter"}, nil)

// dropCollector reads the guard's counters at scrape time: the kernel keeps them.
type dropCollector struct{ b *statusBoard }

func (c dropCollector) Describe(ch chan<- *prometheus.Desc) { ch <- spoofDroppedDesc }

func (c dropCollector) Collect(ch chan<- prometheus.Metric) {
	for k, v := range c.b.spoofDropped() {
		ch <- prometheus.MustNewConstMetric(spoofDroppedDesc, prometheus.CounterValue, float64(v), k)
	}
}
