package runner

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// stoppedPreparing is why a preparation ended: a stop signal before the hypervisor started.
type stoppedPreparing struct{ sig string }

func (s *stoppedPreparing) Error() string {
	return "stopped on " + s.sig + " before the guest started"
}

// stopWhilePreparing returns a context that a stop signal cancels until prepared is called,
// and the channel every signal is passed on to, for the supervisor. Until the hypervisor runs
// there is no guest to power down, and the waits before it (filling a root volume, the node
// agent's plumbing) would otherwise outlast the pod's grace period: the kubelet's SIGKILL then
// left the runner's sockets behind in its control directory.
func stopWhilePreparing(ctx context.Context, sigs <-chan os.Signal) (_ context.Context, _ <-chan os.Signal, prepared func()) {
	if sigs == nil {
		return ctx, nil, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	out := make(chan os.Signal, cap(sigs)+1)
	var preparing atomic.Bool
	preparing.Store(true)
	go func() {
		for sig := range sigs {
			if preparing.Load() {
				cancel(&stoppedPreparing{sig: signalName(sig)})
			}
			out <- arrived{sig: sig, at: time.Now()}
		}
	}()
	return ctx, out, func() { preparing.Store(false) }
}

// arrived is a signal with the time it came: the grace period runs from there, not from when
// the supervisor got to it (a runner still starting its hypervisor reads it later).
type arrived struct {
	sig os.Signal
	at  time.Time
}

func (a arrived) String() string { return a.sig.String() }
func (a arrived) Signal()        {}

// graceEnd is when a stop's grace period of d ends, counted from the signal's arrival.
func graceEnd(sig os.Signal, d time.Duration) time.Duration {
	if a, ok := sig.(arrived); ok {
		return max(0, time.Until(a.at.Add(d)))
	}
	return d
}

// stoppedOutcome is a preparation's end by a stop signal as the runner's outcome: a stop, not a
// failure, whatever step it cut short.
func stoppedOutcome(ctx context.Context, out Outcome) Outcome {
	var s *stoppedPreparing
	if out.Code != ExitOK && errors.As(context.Cause(ctx), &s) {
		return Outcome{Code: ExitOK, Message: s.Error()}
	}
	return out
}

func signalName(sig os.Signal) string {
	if a, ok := sig.(arrived); ok {
		sig = a.sig
	}
	if s, ok := sig.(syscall.Signal); ok {
		if n := unix.SignalName(s); n != "" {
			return n
		}
	}
	return sig.String()
}
