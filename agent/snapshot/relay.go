package snapshot

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/agent/podcontrol"
)

// relays are the sockets this agent opened in a runner's control directory for one copy, each
// relaying the runner's QEMU's NBD connections to the copier's target socket.
type relays struct {
	log       *zap.Logger
	mu        sync.Mutex
	listeners []net.Listener
	conns     []net.Conn
	closed    bool
	wg        sync.WaitGroup
}

// open listens on name in src and relays every connection to target in dst.
func (r *relays) open(ctx context.Context, src podcontrol.Control, name string, dst podcontrol.Control, target string) error {
	l, err := src.Listen(name)
	if err != nil {
		return fmt.Errorf("opening %s for the runner's copy: %w", name, err)
	}
	r.mu.Lock()
	r.listeners = append(r.listeners, l)
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return // closed
			}
			out, err := dst.Dial(ctx, target)
			if err != nil {
				r.log.Warn("the copier's target does not answer", zap.String("socket", target), zap.Error(err))
				in.Close()
				continue
			}
			r.pipe(in, out)
		}
	}()
	return nil
}

// pipe copies both ways until either side ends, passing each side's end on as a half-close so
// the last NBD reply is not cut off.
func (r *relays) pipe(a, b net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		a.Close()
		b.Close()
		return
	}
	r.conns = append(r.conns, a, b)
	one := func(to, from net.Conn) {
		defer r.wg.Done()
		_, _ = io.Copy(to, from)
		if c, ok := to.(interface{ CloseWrite() error }); ok {
			_ = c.CloseWrite()
		}
	}
	r.wg.Add(2)
	go one(a, b)
	go one(b, a)
}

// close ends the listeners (removing their sockets) and every connection, and waits for the
// copies to stop.
func (r *relays) close() {
	r.mu.Lock()
	r.closed = true
	for _, l := range r.listeners {
		l.Close()
	}
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
