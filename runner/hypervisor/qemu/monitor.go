package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
)

// monitor is a QMP connection on a unix socket: one command at a time, each reply handed to its
// caller, every event to the one reader of Events. It stands in for go-qemu's SocketMonitor,
// whose reader hands Run the scanner's own buffer, which the next line (an event) can overwrite
// before Run decodes it (seen as "invalid character '_'" in a migration test; docs/history.md).
// Here every line is a fresh slice. It satisfies qmp.Monitor, so go-qemu's raw commands run on it.
type monitor struct {
	conn    net.Conn
	version qmp.Version
	mu      sync.Mutex  // one command at a time, so a reply is the one command's in flight
	replies chan []byte // command replies, in order; closed when the connection ends
	events  chan qmp.Event
	readErr error // why the reader stopped; read after replies is closed
}

// errMonitorClosed is a command's answer once QEMU's end of the socket closed.
var errMonitorClosed = errors.New("QMP connection closed")

// dialMonitor connects to QEMU's QMP socket at path, reads the greeting and leaves capability
// negotiation, and starts the reader. Events are kept (up to a small buffer, then the reader
// waits) for whoever reads Events: subscribe before anything that emits them.
func dialMonitor(path string, timeout time.Duration) (*monitor, error) {
	conn, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return nil, err
	}
	m := &monitor{conn: conn, replies: make(chan []byte, 1), events: make(chan qmp.Event, 16)}
	r := bufio.NewReader(conn)
	_ = conn.SetDeadline(time.Now().Add(timeout))
	var greeting struct {
		QMP struct {
			Version qmp.Version `json:"version"`
		} `json:"QMP"`
	}
	line, err := r.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &greeting)
	}
	if err == nil {
		_, err = conn.Write([]byte(`{"execute":"qmp_capabilities"}` + "\n"))
	}
	if err == nil {
		line, err = r.ReadBytes('\n')
	}
	if err == nil {
		err = replyError(line)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("QMP handshake on %s: %w", path, err)
	}
	_ = conn.SetDeadline(time.Time{})
	m.version = greeting.QMP.Version
	go m.read(r)
	return m, nil
}

// read sorts QEMU's lines into replies and events until the connection ends. ReadBytes returns
// a new slice for every line, so no later line can change one already handed on.
func (m *monitor) read(r *bufio.Reader) {
	defer close(m.events)
	defer close(m.replies)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			m.readErr = err
			return
		}
		var e qmp.Event
		if json.Unmarshal(line, &e) != nil {
			continue // not JSON: QEMU never sends such a line; skip rather than stall
		}
		if e.Event != "" {
			m.events <- e
			continue
		}
		m.replies <- line
	}
}

// Run sends one command and returns its reply, or QEMU's error as a Go error.
func (m *monitor) Run(command []byte) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.conn.Write(append(command, '\n')); err != nil {
		return nil, err
	}
	reply, ok := <-m.replies
	if !ok {
		if m.readErr != nil {
			return nil, fmt.Errorf("%w: %v", errMonitorClosed, m.readErr)
		}
		return nil, errMonitorClosed
	}
	if err := replyError(reply); err != nil {
		return nil, err
	}
	return reply, nil
}

// Events is the stream of QEMU's events; it ends when the connection does. There is one stream:
// call it once.
func (m *monitor) Events(context.Context) (<-chan qmp.Event, error) { return m.events, nil }

// Connect is part of qmp.Monitor; dialMonitor has connected already.
func (m *monitor) Connect() error { return nil }

// Disconnect closes the connection; the reader then ends both streams.
func (m *monitor) Disconnect() error { return m.conn.Close() }

// replyError is QEMU's error in a reply line, if it holds one.
func replyError(line []byte) error {
	var r struct {
		Error *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
	}
	if err := json.Unmarshal(line, &r); err != nil {
		return fmt.Errorf("QMP reply %q: %w", line, err)
	}
	if r.Error != nil {
		return errors.New(r.Error.Desc)
	}
	return nil
}

var _ qmp.Monitor = (*monitor)(nil)
