package streampipe_test

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/virtpod/virtpod/agent/migration/streampipe"
)

// relay is the layout of a migration between two nodes: the sender (QEMU at the source) on a
// unix socket to the relay, which pipes it over TCP to the receiver (the target's agent).
type relay struct {
	sender, receiver net.Conn
	done             chan result
}

type result struct {
	sent int64
	err  error
}

func newRelay(t *testing.T) *relay {
	t.Helper()
	ul, err := net.Listen("unix", filepath.Join(t.TempDir(), "out.sock"))
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ul.Close(); tl.Close() })
	sender, err := net.Dial("unix", ul.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a, err := ul.Accept()
	if err != nil {
		t.Fatal(err)
	}
	b, err := net.Dial("tcp", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	receiver, err := tl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{sender: sender, receiver: receiver, done: make(chan result, 1)}
	t.Cleanup(func() { sender.Close(); receiver.Close() })
	go func() {
		n, err := streampipe.Pipe(a, a, b, b)
		r.done <- result{n, err}
	}()
	return r
}

func (r *relay) wait(t *testing.T) result {
	t.Helper()
	select {
	case res := <-r.done:
		return res
	case <-time.After(30 * time.Second):
		t.Fatal("the pipe did not end in 30 s")
		return result{}
	}
}

func stream(size int) []byte {
	b := make([]byte, size)
	rng := rand.NewChaCha8([32]byte{7})
	_, _ = rng.Read(b)
	return b
}

// The receiver answers while the stream flows, and the sender closes as soon as it has written
// everything, leaving answers unread (as QEMU does at the end of a migration): every byte of
// the stream still reaches the receiver, and the pipe reports no error.
func TestTailArrivesAfterTheSenderCloses(t *testing.T) {
	for i := range 20 {
		r := newRelay(t)
		want := stream(4<<20 + i*4099)
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := r.receiver.Write([]byte("answer")); err != nil {
					return
				}
				time.Sleep(100 * time.Microsecond)
			}
		}()
		go func() {
			_, _ = r.sender.Write(want)
			r.sender.Close()
		}()
		got, err := io.ReadAll(r.receiver)
		close(stop)
		if err != nil {
			t.Fatalf("run %d: the receiver's read: %v", i, err)
		}
		if len(got) != len(want) || sha256.Sum256(got) != sha256.Sum256(want) {
			t.Fatalf("run %d: the receiver got %d bytes (equal: %v), want the %d sent", i, len(got), bytes.Equal(got, want), len(want))
		}
		r.receiver.Close()
		if res := r.wait(t); res.err != nil || res.sent != int64(len(want)) {
			t.Fatalf("run %d: the pipe returned %d bytes, %v; want %d, no error", i, res.sent, res.err, len(want))
		}
	}
}

// Each end passes on as a half-close: the sender's end reaches the receiver, which still
// answers, and the answer reaches the sender.
func TestHalfClosesPassThrough(t *testing.T) {
	r := newRelay(t)
	if _, err := r.sender.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := r.sender.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r.receiver)
	if err != nil || string(got) != "request" {
		t.Fatalf("the receiver read %q, %v; want the request, then the end", got, err)
	}
	if _, err := r.receiver.Write([]byte("reply")); err != nil {
		t.Fatal(err)
	}
	r.receiver.Close()
	got, err = io.ReadAll(r.sender)
	if err != nil || string(got) != "reply" {
		t.Fatalf("the sender read %q, %v; want the reply, then the end", got, err)
	}
	if res := r.wait(t); res.err != nil || res.sent != int64(len("request")) {
		t.Fatalf("the pipe returned %d bytes, %v; want 7, no error", res.sent, res.err)
	}
}

// A receiver that goes away mid-stream stops the sender: its writes fail instead of filling a
// connection nobody reads, and the pipe reports the break.
func TestReceiverGoneStopsTheSender(t *testing.T) {
	r := newRelay(t)
	wrote := make(chan error, 1)
	go func() {
		chunk := stream(64 << 10)
		for range 1 << 12 { // 256 MiB at most
			if _, err := r.sender.Write(chunk); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	if _, err := io.ReadFull(r.receiver, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	r.receiver.Close()
	select {
	case err := <-wrote:
		if err == nil {
			t.Fatal("the sender wrote 256 MiB into a stream whose receiver had gone")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sender still writes 30 s after the receiver went")
	}
	if res := r.wait(t); res.err == nil {
		t.Fatalf("the pipe ended without an error after %d bytes, want the break", res.sent)
	}
}
