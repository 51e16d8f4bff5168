package guestagent

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// realAgent starts the host's qemu-ga listening on a unix socket: the same program the guests
// run, answering about this machine.
func realAgent(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("qemu-ga")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("qemu-ga not found: install qemu-guest-agent (tools/dev/ci/install-deps.sh)")
		}
		t.Skip("qemu-ga not found: install qemu-guest-agent")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "qga.sock")
	cmd := exec.Command(bin, "-m", "unix-listen", "-p", sock, "-t", dir, "-f", filepath.Join(dir, "pid"))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(sock); err == nil {
			return sock
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("qemu-ga did not listen")
	return ""
}

func TestFactsFromTheRealAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, realAgent(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f, err := c.Facts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	release, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	if f.Hostname != host || f.OS == nil || f.OS.ID != "debian" || f.OS.KernelRelease != strings.TrimSpace(string(release)) {
		t.Errorf("facts %+v (os %+v), want hostname %s, debian, kernel %s", f, f.OS, host, release)
	}
	for _, i := range f.Interfaces {
		if i.Name == "lo" {
			t.Errorf("loopback listed: %+v", f.Interfaces)
		}
	}
	// An abandoned exchange (a command whose answer was never read) does not confuse the next.
	if _, err := c.conn.Write([]byte(`{"execute":"guest-info"}`)); err != nil {
		t.Fatal(err)
	}
	c.synced = false
	var again Facts
	if again, err = c.Facts(ctx); err != nil || again.Hostname != host {
		t.Errorf("after an abandoned command: %+v, %v", again, err)
	}
	// A command the agent does not know is its refusal, named.
	var ae *AgentError
	if err := c.Call(ctx, "guest-no-such-command", nil, nil); !errors.As(err, &ae) || ae.Class == "" {
		t.Errorf("unknown command: %v, want the agent's refusal", err)
	}
}

// A channel nobody reads in the guest (no agent yet): QEMU accepts the connection and never
// answers. The call ends at its deadline with ErrNoAgent.
func TestNoAgentTimesOut(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "qga.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if conn, err := l.Accept(); err == nil {
			_, _ = bufio.NewReader(conn).ReadString(0) // reads, never answers
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Facts(ctx); !errors.Is(err, ErrNoAgent) {
		t.Errorf("Facts: %v, want ErrNoAgent", err)
	}
}

// A hostile guest: an answer that never ends is cut at maxAnswer; stale answers and noise
// before the sync's 0xFF are skipped.
func TestHostileChannel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reply   func(id string) string
		wantErr bool
	}{
		{"endless answer", func(string) string { return "\xff{\"return\":\"" + strings.Repeat("a", maxAnswer+10) }, true},
		{"noise, a stale answer, then the sync", func(id string) string {
			return "garbage\x00{\"return\": 7}\xff{\"return\": 7}\n\xff{\"return\": " + id + "}\n{\"return\": {\"host-name\": \"h\\u0007ost\\n\"}}"
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			go func() {
				r := bufio.NewReader(b)
				_, _ = r.ReadBytes(0xff)
				line, _ := r.ReadString('}') // {"execute":...,"arguments":{"id":N}
				id := line[strings.LastIndex(line, ":")+1 : len(line)-1]
				_, _ = b.Write([]byte(tc.reply(id)))
				_, _ = io.Copy(io.Discard, r)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			c := New(a)
			var h hostName
			err := c.Call(ctx, "guest-get-host-name", nil, &h)
			if tc.wantErr != (err != nil) {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if err == nil && CleanText(h.HostName) != "host" {
				t.Errorf("host name %q cleaned to %q, want host", h.HostName, CleanText(h.HostName))
			}
		})
	}
}
