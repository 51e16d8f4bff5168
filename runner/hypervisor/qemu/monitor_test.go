package qemu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeQMP serves one QMP connection on a unix socket: the greeting, the capabilities reply, then
// for each command {"return":{"echo":<its execute>}} followed at once, in the same write, by an
// event as long as the reader's buffer, so the event line lands on top of a reply a reader did not
// copy. A command named "fail" gets an error reply, "bye" closes the connection.
func fakeQMP(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qmp.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(c, `{"QMP": {"version": {"qemu": {"micro": 0, "minor": 0, "major": 10}, "package": ""}, "capabilities": []}}`+"\n")
		r := bufio.NewReader(c)
		pad := strings.Repeat("x", 5000)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			var cmd struct{ Execute string }
			_ = json.Unmarshal(line, &cmd)
			switch cmd.Execute {
			case "qmp_capabilities":
				fmt.Fprintf(c, `{"return": {}}`+"\n")
			case "fail":
				fmt.Fprintf(c, `{"error": {"class": "GenericError", "desc": "no such thing"}}`+"\n")
			case "bye":
				return
			default:
				fmt.Fprintf(c, `{"return": {"echo": %q}}`+"\n"+`{"event": "__PAD", "data": {"pad": %q}, "timestamp": {"seconds": 1, "microseconds": 2}}`+"\n", cmd.Execute, pad)
			}
		}
	}()
	return path
}

// TestMonitorRepliesSurviveEvents: every reply reaches its command intact though an event line
// follows each at once (go-qemu's SocketMonitor failed this with "invalid character '_'"), every
// event reaches the events stream, QEMU's errors come back as errors, and a closed connection
// answers a command with an error instead of hanging.
func TestMonitorRepliesSurviveEvents(t *testing.T) {
	m, err := dialMonitor(fakeQMP(t), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.version.QEMU.Major != 10 {
		t.Errorf("version %+v, want 10.0.0", m.version)
	}
	evs, _ := m.Events(t.Context())
	got := make(chan int)
	go func() {
		n := 0
		for e := range evs {
			if e.Event == "__PAD" {
				n++
			}
		}
		got <- n
	}()
	const commands = 2000
	for i := range commands {
		name := fmt.Sprintf("cmd-%d", i)
		reply, err := m.Run([]byte(fmt.Sprintf(`{"execute": %q}`, name)))
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
		var r struct{ Return struct{ Echo string } }
		if err := json.Unmarshal(reply, &r); err != nil || r.Return.Echo != name {
			t.Fatalf("command %d: reply %q (%v), want the echo of %s", i, reply, err, name)
		}
	}
	if _, err := m.Run([]byte(`{"execute": "fail"}`)); err == nil || err.Error() != "no such thing" {
		t.Errorf("an error reply: %v, want QEMU's description", err)
	}
	done := make(chan error)
	go func() { _, err := m.Run([]byte(`{"execute": "bye"}`)); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a command on a closed connection succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a command on a closed connection hung")
	}
	if n := <-got; n != commands {
		t.Errorf("%d events seen, want %d", n, commands)
	}
	_ = m.Disconnect()
}
