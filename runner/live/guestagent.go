package live

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/guestagent"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// AgentSocketName is QEMU's end of the guest agent's channel, in the state directory.
const AgentSocketName = "qga.sock"

// GuestAgent is the runner's end of the guest agent's channel: what the control API's GET
// /v1/guest answers, and the first way a stop asks the guest to power off. It asks QEMU whether
// the guest has the port open before it asks the agent, so a guest without an agent costs a
// QMP query, never a timeout. One connection, one command at a time.
type GuestAgent struct {
	sock string
	ch   hypervisor.AgentChannel // nil: the guest has no channel

	mu sync.Mutex
	c  *guestagent.Client
}

// NewGuestAgent is nil-safe to use: a guest without a channel gets a GuestAgent that says so.
func NewGuestAgent(sock string, hv hypervisor.Hypervisor) *GuestAgent {
	g := &GuestAgent{sock: sock}
	if ch, ok := hv.(hypervisor.AgentChannel); ok && sock != "" {
		g.ch = ch
	}
	return g
}

// errAgentClosed: the guest has no agent listening on its channel; errNoChannel: it has no
// channel (no --guest-agent).
var (
	errAgentClosed = errors.New("no guest agent has the channel open")
	errNoChannel   = errors.New("the guest has no agent channel")
)

// client connects once; a failed exchange drops the connection (drop), so the next one starts
// over. Called with mu held.
func (g *GuestAgent) client(ctx context.Context) (*guestagent.Client, error) {
	if g.ch == nil {
		return nil, errNoChannel
	}
	open, err := g.ch.AgentChannelOpen(ctx)
	if err != nil {
		return nil, err
	}
	if !open {
		g.drop()
		return nil, errAgentClosed
	}
	if g.c == nil {
		if g.c, err = guestagent.Dial(ctx, g.sock); err != nil {
			return nil, err
		}
	}
	return g.c, nil
}

func (g *GuestAgent) drop() {
	if g.c != nil {
		_ = g.c.Close()
		g.c = nil
	}
}

// facts is what the agent says now.
func (g *GuestAgent) facts(ctx context.Context) controlapi.Guest {
	if g.ch == nil {
		return controlapi.Guest{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	c, err := g.client(ctx)
	switch {
	case errors.Is(err, errAgentClosed):
		return controlapi.Guest{Channel: true}
	case err != nil:
		return controlapi.Guest{Channel: true, Error: err.Error()}
	}
	f, err := c.Facts(ctx)
	if err != nil {
		g.drop()
		return controlapi.Guest{Channel: true, Error: err.Error()}
	}
	return controlapi.Guest{Channel: true, Connected: true, OS: f.OS, Hostname: f.Hostname, Interfaces: f.Interfaces, Bootstrap: f.Bootstrap}
}

// shutdown asks the agent to power the guest off; an error says the caller must use ACPI.
func (g *GuestAgent) Shutdown(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	if err := c.Shutdown(ctx); err != nil {
		g.drop()
		return err
	}
	return nil
}

// Freeze asks the agent to freeze the guest's file systems, and returns how many it froze. After
// any answer but "no agent", the caller must Thaw: a freeze that timed out may still happen.
func (g *GuestAgent) Freeze(ctx context.Context) (int, error) {
	return g.fsfreeze(ctx, (*guestagent.Client).Freeze)
}

// Thaw asks the agent to thaw the guest's file systems, and returns how many it thawed.
func (g *GuestAgent) Thaw(ctx context.Context) (int, error) {
	return g.fsfreeze(ctx, (*guestagent.Client).Thaw)
}

// fsfreeze runs one freeze or thaw over the connection; a failed exchange drops it, so the next
// one starts with a fresh sync.
func (g *GuestAgent) fsfreeze(ctx context.Context, call func(*guestagent.Client, context.Context) (int, error)) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, err := g.client(ctx)
	if err != nil {
		return 0, err
	}
	n, err := call(c, ctx)
	if err != nil {
		var refused *guestagent.AgentError
		if !errors.As(err, &refused) {
			g.drop()
		}
		return n, err
	}
	return n, nil
}

// NoAgent reports whether err says no agent listens, or the guest has no channel: nothing was
// asked of the guest.
func NoAgent(err error) bool { return errors.Is(err, errAgentClosed) || errors.Is(err, errNoChannel) }

// Routes registers GET /v1/guest.
func (g *GuestAgent) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+controlapi.GuestPath, g.serveGuest)
}

// serveGuest is GET /v1/guest.
func (g *GuestAgent) serveGuest(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	writeJSON(w, http.StatusOK, g.facts(ctx))
}
