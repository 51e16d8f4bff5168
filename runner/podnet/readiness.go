package podnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/status"
)

// The guest readiness probe's fixed timing: a check every probePeriod, each given probeTimeout.
// The kubelet's own readiness probe on /readyz adds its thresholds on top.
const (
	probePeriod  = 2 * time.Second
	probeTimeout = time.Second
)

// Probe checks the guest at its address (the pod IP, or 10.0.2.2 in masquerade mode), from
// one goroutine, and keeps the last result for /readyz and /status, so the kubelet's probes never
// wait on the guest.
type Probe struct {
	probe  runnerconfig.Probe
	target net.IP
	src    *net.TCPAddr // the runner's address towards the guest (guestnet.RelayIP or RelayIP6, or 10.0.2.1 in masquerade mode); nil: any
	log    *zap.Logger

	mu sync.Mutex
	st status.ProbeStatus
}

// NewProbe is a readiness probe of the guest at target, from src; Run runs it.
func NewProbe(p runnerconfig.Probe, target net.IP, src *net.TCPAddr, log *zap.Logger) *Probe {
	return &Probe{probe: p, target: target, src: src, log: log,
		st: status.ProbeStatus{Probe: p.String(), Message: "no check has run yet"}}
}

// Run checks every probePeriod until ctx ends, starting at once.
func (g *Probe) Run(ctx context.Context) {
	t := time.NewTicker(probePeriod)
	defer t.Stop()
	for {
		g.record(g.check(ctx))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (g *Probe) record(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	was := g.st.Passed
	g.st.LastChecked = time.Now()
	if err == nil {
		g.st.Passed, g.st.Message, g.st.ConsecutiveFailures = true, "", 0
	} else {
		g.st.Passed, g.st.Message = false, err.Error()
		g.st.ConsecutiveFailures++
	}
	if was != g.st.Passed || g.st.ConsecutiveFailures == 1 {
		g.log.Info("guest readiness probe", zap.String("probe", g.st.Probe), zap.Bool("passed", g.st.Passed), zap.String("message", g.st.Message))
	}
}

// Status is the last check's result.
func (g *Probe) Status() status.ProbeStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.st
}

// NotReady is the one line /readyz answers while the probe fails, or "" when it passed.
func (g *Probe) NotReady() string {
	st := g.Status()
	if st.Passed {
		return ""
	}
	return fmt.Sprintf("guest readiness probe %s: %s", g.probe.Describe(), st.Message)
}

// check runs one check: a TCP connection, or an HTTP GET answered 2xx or 3xx (redirects are
// not followed: the guest answered).
func (g *Probe) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	d := net.Dialer{}
	if g.src != nil {
		d.LocalAddr = g.src
	}
	addr := net.JoinHostPort(g.target.String(), strconv.Itoa(int(g.probe.Port)))
	if g.probe.Kind == runnerconfig.ProbeTCP {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return probeError(err)
		}
		return c.Close()
	}
	client := &http.Client{
		Transport:     &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+g.probe.Path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "virtpod-runner/readiness-probe")
	resp, err := client.Do(req)
	if err != nil {
		return probeError(err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

// probeError says in a few words why the guest did not answer.
func probeError(err error) error {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return errors.New("connection refused")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("no answer within %s", probeTimeout)
	case errors.Is(err, syscall.ECONNRESET):
		return errors.New("connection reset")
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("connection closed without an answer")
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return errors.New("guest unreachable")
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}
