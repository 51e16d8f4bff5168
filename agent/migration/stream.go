package migration

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// The stream between two agents: after the TLS handshake the sender writes one header line,
// the receiver answers one line, "OK" or "ERROR <why>", and from then on the connection carries
// QEMU's migration stream both ways unchanged.

// header names the target pod and the migration the stream is for, and which of its streams
// this is: QEMU's migration stream (Channel ""), or the NBD connection of one disk's mirror.
type header struct {
	PodUID    string `json:"podUID"`
	Migration string `json:"migration"`
	Channel   string `json:"channel,omitempty"`
}

// ChannelNBD is a disk mirror's NBD connection, relayed to the target's NBD server.
const ChannelNBD = "nbd"

// maxNBDPerTarget bounds a target pod's NBD connections: one per mirrored disk.
const maxNBDPerTarget = 32

const (
	maxLine          = 4 << 10
	handshakeTimeout = 15 * time.Second
	answerOK         = "OK"
	answerError      = "ERROR "
)

// readLine reads one line of at most maxLine bytes, without its newline.
func readLine(r *bufio.Reader) (string, error) {
	b, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return "", fmt.Errorf("a line longer than %d bytes", maxLine)
	}
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// oneLine makes a message fit on the answer line.
func oneLine(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "\r", " ") }

// dialReceiver opens a stream to the receiver at addr for target pod podUID and waits for its
// OK. The returned reader holds what the receiver sent after it.
func dialReceiver(ctx context.Context, cfg *tls.Config, addr string, h header) (net.Conn, *bufio.Reader, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: handshakeTimeout}, Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to the target node's agent at %s: %w", addr, err)
	}
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	line, _ := json.Marshal(h)
	r := bufio.NewReaderSize(conn, maxLine)
	answer, err := func() (string, error) {
		if _, err := conn.Write(append(line, '\n')); err != nil {
			return "", err
		}
		return readLine(r)
	}()
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("the target node's agent at %s did not answer: %w", addr, err)
	}
	if answer != answerOK {
		conn.Close()
		return nil, nil, &refusedError{fmt.Sprintf("the target node's agent at %s refused the stream: %s", addr, strings.TrimPrefix(answer, answerError))}
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, r, nil
}

// refusedError is the receiver's refusal: trying again gets the same answer.
type refusedError struct{ msg string }

func (r *refusedError) Error() string { return r.msg }
