// Package guestagent speaks the QEMU guest agent's protocol (qemu-guest-agent, "QGA") on the
// host's end of its virtio-serial channel: JSON commands one at a time, each answered once.
// The channel is a byte pipe that outlives the agent inside the guest: a command sent while no
// agent runs is answered by the next agent that starts, or never, and a late answer to an
// abandoned command may come first. So every exchange after a failure begins with
// guest-sync-delimited and a fresh id, and what comes before its answer is discarded — the
// protocol's own recovery (qemu docs/interop/qemu-ga.rst).
//
// Everything the guest says is untrusted: answers are read with a size limit, and the facts
// (Facts) are bounded and cleaned before anyone else sees them.
package guestagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"time"
)

// maxAnswer bounds one answer: the guest writes it, and a guest that never ends a line must
// not fill the runner's memory. An answer of 32 interfaces with their addresses is under 16 KiB.
const maxAnswer = 256 << 10

// ErrNoAgent is what a call fails with when nothing answered the sync in time: no agent runs
// in the guest (yet), or the guest does not read its channel.
var ErrNoAgent = errors.New("the guest agent did not answer")

// Client is one connection to the channel's socket. It is not safe for concurrent use: the
// protocol has one command in flight.
type Client struct {
	conn   net.Conn
	r      *bufio.Reader
	synced bool
}

// Dial connects to the channel's unix socket (QEMU's chardev, server=on).
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	return New(conn), nil
}

// New speaks over conn, which the Client then owns.
func New(conn net.Conn) *Client {
	return &Client{conn: conn, r: bufio.NewReaderSize(conn, 4096)}
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

type command struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
}

type answer struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
}

// AgentError is the agent's refusal of a command, in its words.
type AgentError struct{ Command, Class, Desc string }

func (e *AgentError) Error() string {
	return fmt.Sprintf("guest agent: %s: %s (%s)", e.Command, e.Desc, e.Class)
}

// Sync makes sure the next answer read is the next command's: it resets the agent's parser
// (a 0xFF byte is invalid JSON, which makes it drop what it had), sends guest-sync-delimited
// with a random id and discards everything up to the 0xFF the agent puts before its answer,
// and any answer that does not carry the id.
func (c *Client) Sync(ctx context.Context) error {
	c.synced = false
	id := rand.Int64N(1 << 50)
	c.deadline(ctx)
	b, _ := json.Marshal(command{Execute: "guest-sync-delimited", Arguments: map[string]int64{"id": id}})
	if _, err := c.conn.Write(append([]byte{0xff}, b...)); err != nil {
		return c.noAgent(err)
	}
	for {
		if _, err := c.r.ReadBytes(0xff); err != nil {
			return c.noAgent(err)
		}
		var got int64
		a, err := c.read()
		if err != nil {
			return c.noAgent(err)
		}
		if a.Error == nil && json.Unmarshal(a.Return, &got) == nil && got == id {
			c.synced = true
			return nil
		}
	}
}

// noAgent maps a timeout to ErrNoAgent; other errors (the socket closed: QEMU gone) stay.
func (c *Client) noAgent(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ErrNoAgent
	}
	return err
}

// deadline bounds the exchange by ctx's deadline, or by a default: a command the agent does
// not answer must not hold the caller.
func (c *Client) deadline(ctx context.Context) {
	d, ok := ctx.Deadline()
	if !ok {
		d = time.Now().Add(5 * time.Second)
	}
	_ = c.conn.SetDeadline(d)
}

// read decodes one answer of at most maxAnswer bytes.
func (c *Client) read() (answer, error) {
	var a answer
	dec := json.NewDecoder(io.LimitReader(c.r, maxAnswer))
	if err := dec.Decode(&a); err != nil {
		return a, fmt.Errorf("guest agent: reading an answer: %w", err)
	}
	// The decoder may have read ahead into the next answer: give that back.
	rest, _ := io.ReadAll(dec.Buffered())
	if len(rest) > 0 {
		c.r = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(rest), c.r), 4096)
	}
	return a, nil
}

// Call runs one command and decodes its answer into out (nil: ignore it). It syncs first
// when the last exchange did not end cleanly.
func (c *Client) Call(ctx context.Context, name string, args, out any) error {
	if !c.synced {
		if err := c.Sync(ctx); err != nil {
			return err
		}
	}
	c.synced = false
	c.deadline(ctx)
	b, err := json.Marshal(command{Execute: name, Arguments: args})
	if err != nil {
		return err
	}
	if _, err := c.conn.Write(b); err != nil {
		return c.noAgent(err)
	}
	a, err := c.read()
	if err != nil {
		return c.noAgent(err)
	}
	c.synced = true
	if a.Error != nil {
		return &AgentError{Command: name, Class: a.Error.Class, Desc: a.Error.Desc}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(a.Return, out); err != nil {
		return fmt.Errorf("guest agent: %s: %w", name, err)
	}
	return nil
}

// Shutdown asks the guest to power off (guest-shutdown, mode powerdown). The agent does not
// answer a shutdown that goes ahead, so success is the command written; a refusal that comes
// within the deadline is returned.
func (c *Client) Shutdown(ctx context.Context) error {
	if err := c.Sync(ctx); err != nil {
		return err
	}
	c.synced = false
	b, _ := json.Marshal(command{Execute: "guest-shutdown", Arguments: map[string]string{"mode": "powerdown"}})
	if _, err := c.conn.Write(b); err != nil {
		return err
	}
	_ = c.conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if a, err := c.read(); err == nil && a.Error != nil {
		return &AgentError{Command: "guest-shutdown", Class: a.Error.Class, Desc: a.Error.Desc}
	}
	return nil
}

// Freeze freezes the guest's file systems (guest-fsfreeze-freeze): the guest flushes them and
// holds every writer until Thaw, which must follow whatever happens (the agent does not thaw by
// itself). It returns how many file systems the agent froze.
func (c *Client) Freeze(ctx context.Context) (int, error) {
	var n int
	err := c.Call(ctx, "guest-fsfreeze-freeze", nil, &n)
	return n, err
}

// Thaw thaws the file systems Freeze froze (guest-fsfreeze-thaw), and returns how many; a guest
// that is not frozen thaws none.
func (c *Client) Thaw(ctx context.Context) (int, error) {
	var n int
	err := c.Call(ctx, "guest-fsfreeze-thaw", nil, &n)
	return n, err
}
