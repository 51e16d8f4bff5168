package console

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

func TestRing(t *testing.T) {
	r := ring{buf: make([]byte, 8)}
	var all []byte
	for i, w := range []string{"", "abc", "defgh", "i", "jklmnopqrstu", "vw", "xyz01234"} {
		r.write([]byte(w))
		all = append(all, w...)
		want := all
		if len(want) > 8 {
			want = want[len(want)-8:]
		}
		if got := r.bytes(); !bytes.Equal(got, want) {
			t.Fatalf("after write %d (%q): ring holds %q, want %q", i, w, got, want)
		}
	}
}

// startConsole stands a unix socket server in for the hypervisor's serial port and attaches.
func startConsole(t *testing.T) (guest net.Conn, sock string, con *Console) {
	t.Helper()
	dir := t.TempDir()
	serial := filepath.Join(dir, "serial.sock")
	l, err := net.Listen("unix", serial)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- c
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sock = filepath.Join(dir, "console.sock")
	con, err = Attach(ctx, serial, sock, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { con.Close() })
	return <-accepted, sock, con
}

// readN reads exactly n bytes from c within a few seconds.
func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

// TestHistoryOnAttach: a client that attaches late first gets the guest's last HistorySize
// bytes, exactly once and in order, then the live output; several clients see the same output
// and each one's keystrokes reach the guest.
func TestHistoryOnAttach(t *testing.T) {
	guest, sock, _ := startConsole(t)
	// More than the history holds, in lines a test can tell apart.
	var early bytes.Buffer
	for i := 0; early.Len() < HistorySize+HistorySize/2; i++ {
		fmt.Fprintf(&early, "boot line %06d\n", i)
	}
	if _, err := guest.Write(early.Bytes()); err != nil {
		t.Fatal(err)
	}
	// The stdout side saw everything; wait until the console has read it all.
	dial := func() net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// A marker written after the early output tells the client when the replay ends.
	if _, err := guest.Write([]byte("PROMPT# ")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the pump reads the serial port before the client attaches
	a := dial()
	all := append(early.Bytes(), "PROMPT# "...)
	want := all[len(all)-HistorySize:]
	if got := readN(t, a, HistorySize); !bytes.Equal(got, want) {
		t.Fatalf("replay is not the last %d bytes of output: starts %q, ends %q", HistorySize, got[:32], got[len(got)-32:])
	}
	b := dial()
	if got := readN(t, b, HistorySize); !bytes.Equal(got, want) {
		t.Fatalf("second client's replay differs: starts %q", got[:32])
	}
	// Live output reaches both, after their replay and nothing else.
	if _, err := guest.Write([]byte("live\n")); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]net.Conn{"first": a, "second": b} {
		if got := readN(t, c, 5); string(got) != "live\n" {
			t.Fatalf("%s client read %q after its replay, want the live line", name, got)
		}
	}
	// Both clients type; the guest gets each line.
	for _, c := range []net.Conn{a, b} {
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if got := readN(t, guest, 2); string(got) != "xx" {
		t.Fatalf("guest read %q from two clients, want \"xx\"", got)
	}
	// A client that leaves does not disturb the other.
	a.Close()
	if _, err := guest.Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, b, 6); string(got) != "after\n" {
		t.Fatalf("remaining client read %q", got)
	}
}

// TestSlowClientLosesNothingWithinBacklog: a client that reads nothing while the guest prints a
// boot's worth of output in many small pieces (as a serial port delivers it) gets all of it once
// it reads, in order: the backlog is counted in bytes, not in pieces.
func TestSlowClientLosesNothingWithinBacklog(t *testing.T) {
	guest, sock, _ := startConsole(t)
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(50 * time.Millisecond) // registered before the output starts
	var want bytes.Buffer
	for i := 0; want.Len() < 600<<10; i++ { // beyond the socket's own buffer
		line := fmt.Sprintf("[%8d] boot message\n", i)
		want.WriteString(line)
		if _, err := guest.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		if i%64 == 0 {
			time.Sleep(time.Millisecond) // let the console read the pieces one by one
		}
	}
	if got := readN(t, c, want.Len()); !bytes.Equal(got, want.Bytes()) {
		i := 0
		for i < len(got) && got[i] == want.Bytes()[i] {
			i++
		}
		t.Fatalf("the slow client's output differs from the guest's at byte %d of %d", i, want.Len())
	}
}
