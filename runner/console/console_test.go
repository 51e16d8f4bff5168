package console

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFanOutAndInput stands a unix socket server in for the hypervisor's serial port.
func TestFanOutAndInput(t *testing.T) {
	dir := t.TempDir()
	serial := filepath.Join(dir, "serial.sock")
	l, err := net.Listen("unix", serial)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	guest := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			guest <- c
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stdout syncBuffer
	con, err := Attach(ctx, serial, filepath.Join(dir, "console.sock"), &stdout)
	if err != nil {
		t.Fatal(err)
	}
	defer con.Close()
	g := <-guest

	client, err := net.Dial("unix", filepath.Join(dir, "console.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	time.Sleep(50 * time.Millisecond) // let the console register the client before output
	if _, err := g.Write([]byte("Probing EDD (edd=off to disable)... ok\n\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-con.FirstOutput():
	case <-ctx.Done():
		t.Fatal("FirstOutput never closed")
	}
	time.Sleep(50 * time.Millisecond)
	select {
	case <-con.KernelOutput():
		t.Fatal("the boot stub's line counted as kernel output")
	default:
	}
	if _, err := g.Write([]byte("boot line 1\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-con.KernelOutput():
	case <-ctx.Done():
		t.Fatal("KernelOutput never closed")
	}
	rd := bufio.NewReader(client)
	line, err := rd.ReadString('\n')
	if err == nil {
		_, _ = rd.ReadString('\n') // the blank line
		line, err = rd.ReadString('\n')
	}
	if err != nil || line != "boot line 1\n" {
		t.Fatalf("console client read %q, %v", line, err)
	}
	if _, err := client.Write([]byte("root\n")); err != nil {
		t.Fatal(err)
	}
	in, err := bufio.NewReader(g).ReadString('\n')
	if err != nil || in != "root\n" {
		t.Fatalf("guest read %q, %v", in, err)
	}
	g.Close()
	select {
	case <-con.Done():
	case <-ctx.Done():
		t.Fatal("Done never closed after the serial port closed")
	}
	if !strings.Contains(stdout.String(), "boot line 1") {
		t.Fatalf("stdout = %q", stdout.String())
	}
}

func TestAttachTimesOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := Attach(ctx, filepath.Join(t.TempDir(), "none.sock"), filepath.Join(t.TempDir(), "c.sock"), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "serial console") {
		t.Fatalf("Attach without a serial socket: %v", err)
	}
}
