// Package status is the runner's account of its guest: the state the supervisor and the live
// operations set, and the read-only HTTP endpoints (/healthz, /startedz, /readyz, /status) the
// kubelet's probes and the node agent read it through.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/virtpod/virtpod/pkg/controlapi"
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
	State      string `json:"state"`
	Hypervisor string `json:"hypervisor"`
	Version    string `json:"version"`
	// Machine is the machine type the guest runs on (QEMU: pc-q35-10.0); "" for providers
	// without versioned machines.
	Machine       string  `json:"machine,omitempty"`
	Acceleration  string  `json:"acceleration"`
	UptimeSeconds float64 `json:"uptimeSeconds"`
	Reason        string  `json:"reason,omitempty"`
	// ReadinessProbe is the guest readiness probe's last result; absent without one.
	ReadinessProbe *ProbeStatus `json:"readinessProbe,omitempty"`
}

// Prober is the guest readiness probe as the board reads it (podnet's probe).
type Prober interface {
	Status() ProbeStatus
	// NotReady is the one line /readyz answers while the probe fails, or "" when it passed.
	NotReady() string
}

// ProbeStatus is the guest readiness probe's part of /status.
type ProbeStatus struct {
	Probe string `json:"probe"` // as the flag has it: tcp:22, http:8080/healthz
	// Passed is the last check's result; false until the first check passes.
	Passed bool `json:"passed"`
	// Message says why the last check failed (or that none ran yet); empty when it passed.
	Message     string    `json:"message,omitempty"`
	LastChecked time.Time `json:"lastChecked,omitzero"`
	// ConsecutiveFailures counts the checks that failed since the last one that passed.
	ConsecutiveFailures int `json:"consecutiveFailures"`
}

// Board holds the guest's state for everyone who reads or sets it; safe for concurrent use.
type Board struct {
	mu      sync.Mutex
	s       Status
	running time.Time     // when the guest last started running
	changed chan struct{} // closed (and replaced) at each change of state
	// probe is the guest readiness probe; nil without one.
	probe Prober
}

// New is a board in state preparing, for the provider and acceleration it names.
func New(hypervisor, acceleration string) *Board {
	return &Board{s: Status{State: StatePreparing, Hypervisor: hypervisor, Acceleration: acceleration}}
}

// Set changes the guest's state and why, waking WaitStarted.
func (b *Board) Set(state, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if state == StateRunning && b.s.State != StateRunning {
		b.running = time.Now()
	}
	b.s.State, b.s.Reason = state, reason
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
}

// waitStarted returns once the guest has run (Since: when it last started), can no longer
// start (the runner stops or failed), or ctx ends; with the state then.
func (b *Board) WaitStarted(ctx context.Context) controlapi.Started {
	for {
		b.mu.Lock()
		st := controlapi.Started{State: b.s.State, Since: b.running, Machine: b.s.Machine}
		st.Started = !st.Since.IsZero()
		st.Ended = !st.Started && (st.State == StateStopping || st.State == StateStopped || st.State == StateFailed)
		if st.Started || st.Ended {
			b.mu.Unlock()
			return st
		}
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return st
		}
	}
}

// setHypervisor records what runs the guest: the hypervisor's version and the machine type it
// builds.
func (b *Board) SetHypervisor(version, machine string) {
	b.mu.Lock()
	b.s.Version, b.s.Machine = version, machine
	b.mu.Unlock()
}

// Get is the status now.
func (b *Board) Get() Status {
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
func (b *Board) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	// /startedz: the guest runs (the pod's startup probe: the VM's phase Running).
	mux.HandleFunc("GET /startedz", func(w http.ResponseWriter, _ *http.Request) {
		if st := b.Get().State; st != StateRunning {
			http.Error(w, "guest is "+st, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if st := b.Get().State; st != StateRunning {
			http.Error(w, "guest is "+st, http.StatusServiceUnavailable)
			return
		}
		// Running is not ready when the VM asked for more: its probe must have passed too.
		if p := b.Probe(); p != nil {
			if msg := p.NotReady(); msg != "" {
				http.Error(w, msg, http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		s := b.Get()
		if p := b.Probe(); p != nil {
			ps := p.Status()
			s.ReadinessProbe = &ps
		}
		_ = json.NewEncoder(w).Encode(s)
	})
	return mux
}

// serve listens on addr (a runnerconfig.HTTPEndpoint) and serves until the returned function
// is called; the listener is open when it returns.
func (b *Board) Serve(network, addr string) (func(), error) {
	if network == "unix" {
		_ = os.Remove(addr) // left by an earlier runner in the same pod
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: b.Handler(), ReadHeaderTimeout: 5 * time.Second}
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

// SetProbe has /readyz and /status report p too.
func (b *Board) SetProbe(p Prober) {
	b.mu.Lock()
	b.probe = p
	b.mu.Unlock()
}

// Probe is the guest readiness probe; nil without one.
func (b *Board) Probe() Prober {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.probe
}

// ControlRoutes registers the board's part of the control API: GET /v1/started, the node
// agent's one question per start.
func (b *Board) ControlRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+controlapi.StartedPath, b.started)
}

// started answers once the guest runs or can no longer start, or after ?waitSeconds= (0 at
// once, at most controlapi.MaxStartedWaitSeconds).
func (b *Board) started(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	wait := 0
	if v := r.URL.Query().Get("waitSeconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf("waitSeconds=%q: want a whole number of seconds, 0 to %d", v, controlapi.MaxStartedWaitSeconds)})
			return
		}
		wait = min(n, controlapi.MaxStartedWaitSeconds)
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(wait)*time.Second)
	defer cancel()
	_ = json.NewEncoder(w).Encode(b.WaitStarted(ctx))
}
