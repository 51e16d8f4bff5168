// Package console connects to a hypervisor's serial-port socket and fans the guest's output
// out to the runner's stdout (so `kubectl logs` shows the boot) and to any clients of an
// interactive console socket, whose keystrokes go back to the guest. A client that attaches
// first gets the guest's latest output (HistorySize bytes), so a prompt printed before it came
// is on its screen.
package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// HistorySize is how much of the guest's latest output a new console client is sent first.
const HistorySize = 64 << 10

// Console is one attached serial port.
type Console struct {
	upstream net.Conn
	out      io.Writer
	listener net.Listener

	mu      sync.Mutex
	clients map[net.Conn]*client
	history ring // under mu: fan-out and replay see the same order

	firstOutput chan struct{}
	firstOnce   sync.Once
	kernelOut   chan struct{}
	kernelOnce  sync.Once
	line        []byte // the current, unfinished console line
	done        chan struct{}
}

// bootStubLines are printed by the x86 kernel's real-mode setup code and decompressor, before
// the kernel proper runs. A KVM that cannot run a kernel (kvm-pvm) still shows them, so they
// do not count as the kernel running.
var bootStubLines = []string{"Probing EDD", "Decompressing Linux", "Parsing ELF", "Booting the kernel", "early console in"}

// Attach dials the serial socket (retrying until ctx ends, since the hypervisor creates it
// shortly after starting), and serves an interactive console on consoleSocket.
func Attach(ctx context.Context, serialSocket, consoleSocket string, out io.Writer) (*Console, error) {
	var up net.Conn
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", serialSocket)
		if err == nil {
			up = c
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to the guest serial console %s: %w", serialSocket, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	_ = os.Remove(consoleSocket)
	l, err := net.Listen("unix", consoleSocket)
	if err != nil {
		up.Close()
		return nil, fmt.Errorf("console socket: %w", err)
	}
	c := &Console{
		upstream: up, out: out, listener: l,
		clients:     map[net.Conn]*client{},
		history:     ring{buf: make([]byte, HistorySize)},
		firstOutput: make(chan struct{}),
		kernelOut:   make(chan struct{}),
		done:        make(chan struct{}),
	}
	go c.pump()
	go c.accept()
	return c, nil
}

// FirstOutput is closed when the guest writes its first byte.
func (c *Console) FirstOutput() <-chan struct{} { return c.firstOutput }

// KernelOutput is closed when the guest completes a console line that is not one of the boot
// stub's: the first sign that the kernel itself runs.
func (c *Console) KernelOutput() <-chan struct{} { return c.kernelOut }

// Done is closed when the serial connection ends (the hypervisor exited).
func (c *Console) Done() <-chan struct{} { return c.done }

// Close stops serving the console.
func (c *Console) Close() error {
	err := errors.Join(c.listener.Close(), c.upstream.Close())
	c.mu.Lock()
	for conn := range c.clients {
		conn.Close()
	}
	c.mu.Unlock()
	return err
}

func (c *Console) pump() {
	defer close(c.done)
	buf := make([]byte, 32<<10)
	for {
		n, err := c.upstream.Read(buf)
		if n > 0 {
			c.firstOnce.Do(func() { close(c.firstOutput) })
			c.scanLines(buf[:n])
			chunk := append([]byte(nil), buf[:n]...)
			_, _ = c.out.Write(chunk)
			c.mu.Lock()
			c.history.write(chunk)
			for _, cl := range c.clients {
				cl.queue(chunk)
			}
			c.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (c *Console) scanLines(b []byte) {
	select {
	case <-c.kernelOut:
		return
	default:
	}
	for _, ch := range b {
		if ch != '\n' {
			if len(c.line) < 256 {
				c.line = append(c.line, ch)
			}
			continue
		}
		line := strings.TrimSpace(string(c.line))
		c.line = c.line[:0]
		if line == "" || slices.ContainsFunc(bootStubLines, func(p string) bool { return strings.HasPrefix(line, p) }) {
			continue
		}
		c.kernelOnce.Do(func() { close(c.kernelOut) })
		return
	}
}

func (c *Console) accept() {
	for {
		conn, err := c.listener.Accept()
		if err != nil {
			return
		}
		cl := &client{wake: make(chan struct{}, 1)}
		c.mu.Lock()
		// The replay is queued under the same lock as the fan-out, so no byte is sent twice or
		// lost between the history and the live output.
		cl.queue(c.history.bytes())
		c.clients[conn] = cl
		c.mu.Unlock()
		go cl.send(conn)
		go func() {
			_, _ = io.Copy(c.upstream, conn)
			c.mu.Lock()
			delete(c.clients, conn)
			close(cl.wake) // under mu: the pump queues only to clients in the map
			c.mu.Unlock()
			conn.Close()
		}()
	}
}

// clientBacklog bounds the output waiting for one slow client. A guest's serial console comes
// in many small reads; the bound is in bytes so a client whose connection is still being set up
// (vmctl console's exec through the API server) loses nothing of a boot.
const clientBacklog = 1 << 20

// client is one console connection's output not yet written to it.
type client struct {
	mu      sync.Mutex
	pending []byte
	wake    chan struct{} // one token: there is something pending
}

// queue adds output for the client; beyond clientBacklog pending bytes the output is dropped
// for this client rather than stall the guest or the other clients.
func (cl *client) queue(b []byte) {
	if len(b) == 0 {
		return
	}
	cl.mu.Lock()
	if len(cl.pending)+len(b) <= clientBacklog {
		cl.pending = append(cl.pending, b...)
	}
	cl.mu.Unlock()
	select {
	case cl.wake <- struct{}{}:
	default:
	}
}

// send writes what is pending, coalesced, until the client leaves.
func (cl *client) send(conn net.Conn) {
	for range cl.wake {
		cl.mu.Lock()
		b := cl.pending
		cl.pending = nil
		cl.mu.Unlock()
		if _, err := conn.Write(b); err != nil {
			conn.Close()
			return
		}
	}
}
