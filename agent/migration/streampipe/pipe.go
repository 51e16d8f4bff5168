// Package streampipe relays a one-way stream with a back channel (a QEMU migration stream, an
// NBD connection) between two connections without losing its tail.
package streampipe

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// Pipe copies the stream from a (read through ar: a, or a buffered reader over it) to b, and
// b's answers (through br) back to a, until both directions end; then it closes both. It
// returns the bytes sent from a to b and the first error.
//
// Each direction passes its end on as a half-close. When the stream's writes to b fail, its
// receiver is gone: both connections close at once, so the sender stops at its next write.
// When the answers' writes to a fail, a's peer has closed while the stream may still be
// draining from a's buffers: the answers are read and dropped until b ends. Closing early
// there would cut the stream's tail (a QEMU migration's device state), and so would closing a
// TCP connection with answers unread, which resets it and drops what it had yet to send.
func Pipe(a net.Conn, ar io.Reader, b net.Conn, br io.Reader) (sent int64, err error) {
	type result struct {
		n        int64
		err      error
		writeErr bool
		forward  bool
	}
	res := make(chan result, 2)
	go func() {
		n, writeErr, err := copyHalf(b, ar)
		res <- result{n, err, writeErr, true}
	}()
	go func() {
		n, writeErr, err := copyHalf(a, br)
		if writeErr {
			// a's peer closed: its end, not a failure of the stream.
			_, _ = io.Copy(io.Discard, br)
			err = nil
		}
		res <- result{n, err, false, false}
	}()
	for range 2 {
		r := <-res
		if r.forward {
			sent = r.n
		}
		if r.err != nil && err == nil {
			err = r.err
		}
		if r.forward && r.writeErr {
			a.Close()
			b.Close()
		}
	}
	a.Close()
	b.Close()
	return sent, err
}

// copyHalf copies src to dst and half-closes dst once src ends (a half-close that fails finds
// the peer gone, which its reads report). writeErr says the error, if any, came from dst.
func copyHalf(dst net.Conn, src io.Reader) (n int64, writeErr bool, err error) {
	buf := make([]byte, 64<<10)
	for {
		m, rerr := src.Read(buf)
		if m > 0 {
			w, werr := dst.Write(buf[:m])
			n += int64(w)
			if werr != nil {
				return n, true, werr
			}
		}
		if rerr != nil {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			// A peer that closes with answers unread resets its connection after what it
			// sent: an end like any other. Whether the stream was whole is for the
			// receiver's own format to say.
			if rerr == io.EOF || errors.Is(rerr, syscall.ECONNRESET) {
				rerr = nil
			}
			return n, false, rerr
		}
	}
}
