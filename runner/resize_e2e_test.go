package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/virtpod/virtpod/pkg/controlapi"

	"github.com/virtpod/virtpod/runner"
	"github.com/virtpod/virtpod/tests/loopback"
)

// resizeFixtureVersion is the first guest fixture that onlines hot-added CPUs and reports its size.
const resizeFixtureVersion = 8

// TestResizeGrowsAndShrinks boots one guest with 1 of 4 vCPUs and 256Mi of 1Gi and drives it
// through the control socket, asserting the guest's own view (/sys/devices/system/cpu/online and
// its online memory blocks, read on its console) at each step:
//   - a vCPU added while the kernel is still booting (after "Run /init") is online once it runs;
//   - it grows to 3 vCPUs and 768Mi, shrinks back to 1 and 256Mi, and its memory grows and
//     shrinks again (under tcg no vCPU is added after a removal: see hypervisor/qemu/resize.go);
//   - bad requests are refused naming the field, and leave the guest as it was.
func TestResizeGrowsAndShrinks(t *testing.T) {
	guest := needResizeGuest(t)
	r := startRunner(t, "", append(baseArgs(t, guest, "vm-resize"), "--max-cpus=4", "--max-memory-mib=1024",
		"--network=none", "--http-addr="+loopback.FreeAddr(t))...)
	ctl := controlClient(r.control)

	// NeonVM #1149: a vCPU hot-added during boot must not stay offline.
	waitOutput(t, r, "Run /init as init process", bootTimeout)
	s := ctl.put(t, 2, "256Mi", http.StatusOK)
	if s.CPUs != 2 || s.Memory != "256Mi" || s.MaxCPUs != 4 || s.MaxMemory != "1Gi" || s.Pending {
		t.Fatalf("PUT during boot answered %+v", s)
	}
	r.waitMarker(t, bootTimeout)
	con := attachLocalConsole(t, runnerBinary(t), r.stateDir)
	con.waitSize(t, "0-1", 256)

	if st, err := os.Stat(r.control); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("control socket %s: %v, mode %v; want 0600", r.control, err, st.Mode())
	}
	for _, step := range []struct {
		cpus   int32
		memory string
		online string
		mib    int
	}{{3, "768Mi", "0-2", 768}, {1, "256Mi", "0", 256}, {1, "768Mi", "0", 768}, {1, "512Mi", "0", 512}} {
		start := time.Now()
		s := ctl.put(t, step.cpus, step.memory, http.StatusOK)
		if s.CPUs != step.cpus || s.Memory != step.memory || s.Pending {
			t.Fatalf("PUT %d/%s answered %+v", step.cpus, step.memory, s)
		}
		con.waitSize(t, step.online, step.mib)
		t.Logf("%d vCPUs, %s: the guest has them %v after the PUT", step.cpus, step.memory, time.Since(start).Round(time.Millisecond))
		if g := ctl.get(t); g != s {
			t.Fatalf("GET after the PUT %+v, want %+v", g, s)
		}
		// The same request again is a no-op that answers the same.
		if again := ctl.put(t, step.cpus, step.memory, http.StatusOK); again != s {
			t.Fatalf("repeated PUT %+v, want %+v", again, s)
		}
	}

	// QEMU 7.2's TCG crashes adding a vCPU after one was removed: the runner refuses instead,
	// in words, and the guest keeps what it has.
	if code, s := ctl.do(t, http.MethodPut, `{"cpus":2,"memory":"512Mi"}`); code != http.StatusConflict ||
		!strings.Contains(s.Error, "cpus: under tcg") || s.CPUs != 1 || s.Memory != "512Mi" {
		t.Fatalf("adding a vCPU after a removal under tcg: %d %+v; want 409 saying why, with the size unchanged", code, s)
	}
	con.waitSize(t, "0", 512)
	ctl.put(t, 1, "256Mi", http.StatusOK)

	for _, bad := range []struct {
		body       string
		code       int
		field, why string
	}{
		{`{"cpus":5,"memory":"256Mi"}`, http.StatusUnprocessableEntity, "cpus:", "1..4"},
		{`{"cpus":0,"memory":"256Mi"}`, http.StatusUnprocessableEntity, "cpus:", "1..4"},
		{`{"cpus":1,"memory":"2Gi"}`, http.StatusUnprocessableEntity, "memory:", "above maxMemory 1Gi"},
		{`{"cpus":1,"memory":"300Mi"}`, http.StatusUnprocessableEntity, "memory:", "not a multiple of 128Mi"},
		{`{"cpus":1,"memory":"128Mi"}`, http.StatusUnprocessableEntity, "memory:", "boot memory 256Mi"},
		{`{"cpus":1,"memory":"lots"}`, http.StatusUnprocessableEntity, "memory:", "not a quantity"},
		{`{"cpus":1}`, http.StatusUnprocessableEntity, "memory:", "required"},
		{`{"cpus":"two","memory":"256Mi"}`, http.StatusBadRequest, "body:", "cpus"},
		{`{"cpus":1,"memory":"256Mi","disk":"1Gi"}`, http.StatusBadRequest, "body:", `unknown field "disk"`},
		{`not json`, http.StatusBadRequest, "body:", "invalid character"},
	} {
		code, s := ctl.do(t, http.MethodPut, bad.body)
		if code != bad.code || !strings.HasPrefix(s.Error, bad.field) || !strings.Contains(s.Error, bad.why) {
			t.Errorf("PUT %s: %d %q; want %d naming %s and %q", bad.body, code, s.Error, bad.code, bad.field, bad.why)
		}
	}
	con.waitSize(t, "0", 256)

	r.signal(t, syscall.SIGTERM)
	if code, msg := r.waitExit(t, 30*time.Second); code != runner.ExitOK {
		t.Fatalf("after SIGTERM: exit %d, %q", code, msg)
	}
	if _, err := os.Stat(r.control); !os.IsNotExist(err) {
		t.Errorf("the control socket outlived the runner: %v", err)
	}
}

// needResizeGuest is needGuestHost with a fixture new enough to report its size.
func needResizeGuest(t testing.TB) string {
	t.Helper()
	guest := needGuestHost(t)
	var m struct{ Version int }
	b, _ := os.ReadFile(filepath.Join(guest, "fixture.json"))
	_ = json.Unmarshal(b, &m)
	need(t, m.Version >= resizeFixtureVersion, fmt.Sprintf("guest fixture %s is version %d, resize needs %d: run make guest-fixture", guest, m.Version, resizeFixtureVersion))
	return guest
}

func waitOutput(t testing.TB, r *runnerProc, s string, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(r.stdout.String(), s) {
			return
		}
	}
	t.Fatalf("%q not on the console within %v", s, d)
}

type ctlClient struct{ c *http.Client }

func controlClient(sock string) ctlClient {
	return ctlClient{&http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}}
}

func (c ctlClient) do(t testing.TB, method, body string) (int, controlapi.Size) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, "http://runner/v1/size", rd)
	resp, err := c.c.Do(req)
	if err != nil {
		t.Fatalf("%s /v1/size: %v", method, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var s controlapi.Size
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s /v1/size: %d %q: %v", method, resp.StatusCode, b, err)
	}
	return resp.StatusCode, s
}

func (c ctlClient) put(t testing.TB, cpus int32, memory string, want int) controlapi.Size {
	t.Helper()
	body, _ := json.Marshal(controlapi.SizeRequest{CPUs: cpus, Memory: memory})
	code, s := c.do(t, http.MethodPut, string(body))
	if code != want {
		t.Fatalf("PUT %s: %d %+v, want %d", body, code, s, want)
	}
	return s
}

func (c ctlClient) get(t testing.TB) controlapi.Size {
	t.Helper()
	code, s := c.do(t, http.MethodGet, "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/size: %d %+v", code, s)
	}
	return s
}

// localConsole is `virtpod-runner console` on a runner outside any network namespace.
type localConsole struct {
	in  io.WriteCloser
	out lockedBuffer
	n   atomic.Int32
}

func attachLocalConsole(t testing.TB, bin, stateDir string) *localConsole {
	t.Helper()
	c := &localConsole{}
	cmd := exec.Command(bin, "console", "--state-dir="+stateDir)
	cmd.Stdout, cmd.Stderr = &c.out, &c.out
	var err error
	if c.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return c
}

var sizeLine = regexp.MustCompile(`VIRTPOD-GUEST-SIZE cpus=\d+ online=(\S+) memory=(\d+)Mi`)

// query asks the guest's shell for its size report; the markers are computed by the shell, so
// the echo of the typed line cannot match them.
func (c *localConsole) query(t testing.TB) (online string, mib int, ok bool) {
	t.Helper()
	n := c.n.Add(1)
	if _, err := fmt.Fprintf(c.in, "echo Q-$((%d+1000)); . /etc/virtpod/size-report; echo E-$((%d+1000))\n", n, n); err != nil {
		t.Fatal(err)
	}
	start, end := fmt.Sprintf("Q-%d", n+1000), fmt.Sprintf("E-%d", n+1000)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		out := c.out.String()
		i, j := strings.LastIndex(out, start), strings.LastIndex(out, end)
		if i < 0 || j < i {
			continue
		}
		m := sizeLine.FindAllStringSubmatch(out[i:j], -1)
		if len(m) == 0 {
			return "", 0, false
		}
		last := m[len(m)-1]
		fmt.Sscan(last[2], &mib)
		return last[1], mib, true
	}
	return "", 0, false
}

// waitSize waits, briefly, for the guest's own view to be online CPUs `online` and mib MiB of
// online memory: the guest onlines a vCPU just after acknowledging it.
func (c *localConsole) waitSize(t testing.TB, online string, mib int) {
	t.Helper()
	var got string
	var gotMiB int
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var ok bool
		if got, gotMiB, ok = c.query(t); ok && got == online && gotMiB == mib {
			return
		}
	}
	t.Fatalf("the guest reports CPUs %q and %d MiB, want %q and %d MiB:\n%s", got, gotMiB, online, mib, tail(c.out.String(), 15))
}
