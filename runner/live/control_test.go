package live

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/hypervisor"
	chdriver "github.com/virtpod/virtpod/runner/hypervisor/cloudhypervisor"
	qemudriver "github.com/virtpod/virtpod/runner/hypervisor/qemu"
)

func resizableConfig() runnerconfig.Config {
	return runnerconfig.Config{GuestSize: vmv1.GuestSize{CPUs: 1, MaxCPUs: 4, MemoryMiB: 256, MaxMemoryMiB: 1024}}
}

func call(t *testing.T, h http.Handler, method, body string) (int, Size) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, "/v1/size", strings.NewReader(body)))
	var s Size
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatalf("%s: %q: %v", method, rec.Body, err)
	}
	return rec.Code, s
}

// stuckGuest takes vCPUs but never gives memory back: the case the 504 is for.
type stuckGuest struct {
	mu   sync.Mutex
	cpus int32
	mem  int64
}

func (g *stuckGuest) GuestSize(context.Context) (int32, int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cpus, g.mem, nil
}

func (g *stuckGuest) Resize(ctx context.Context, cpus int32, mem int64) error {
	g.mu.Lock()
	g.cpus = cpus
	if mem > g.mem {
		g.mem = mem
	}
	done := g.mem == mem
	g.mu.Unlock()
	if done {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestControlTimeoutTellsTheTruth: a guest that keeps its memory past the timeout gives a 504
// with the size it really has.
func TestControlTimeoutTellsTheTruth(t *testing.T) {
	g := &stuckGuest{cpus: 1, mem: 256}
	h := Handler(NewResize(resizableConfig(), g, 200*time.Millisecond, zap.NewNop()).Routes)
	if code, s := call(t, h, http.MethodPut, `{"cpus":3,"memory":"768Mi"}`); code != http.StatusOK || s.CPUs != 3 || s.Memory != "768Mi" {
		t.Fatalf("grow: %d %+v", code, s)
	}
	code, s := call(t, h, http.MethodPut, `{"cpus":2,"memory":"256Mi"}`)
	if code != http.StatusGatewayTimeout || s.CPUs != 2 || s.Memory != "768Mi" || !strings.Contains(s.Error, "deadline") {
		t.Fatalf("shrink the guest does not give back: %d %+v; want 504 with 2 vCPUs and 768Mi", code, s)
	}
}

// TestControlNotRunning: before the hypervisor is up the API answers 409, not a guess.
func TestControlNotRunning(t *testing.T) {
	q := qemudriver.New("", nil, machineForTest(), zap.NewNop())
	h := Handler(NewResize(resizableConfig(), q, time.Second, zap.NewNop()).Routes)
	for _, m := range []string{http.MethodGet, http.MethodPut} {
		if code, s := call(t, h, m, `{"cpus":1,"memory":"256Mi"}`); code != http.StatusConflict || !strings.Contains(s.Error, "not running") {
			t.Errorf("%s before start: %d %+v", m, code, s)
		}
	}
}

// TestCloudHypervisorResize drives the cloud-hypervisor driver's resize through the control API against a server that
// answers vm.resize and vm.info as cloud-hypervisor's API describes them, taking the new size a
// few polls later, as a guest does.
func TestCloudHypervisorResize(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ch.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	vcpus, ram, polls := 1, int64(256<<20), 0
	var want struct {
		DesiredVCPUs int   `json:"desired_vcpus"`
		DesiredRAM   int64 `json:"desired_ram"`
	}
	var bodies []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method + " " + r.URL.Path {
		case "PUT /api/v1/vm.resize":
			dec := json.NewDecoder(r.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&want); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			b, _ := json.Marshal(want)
			bodies, polls = append(bodies, string(b)), 0
			w.WriteHeader(http.StatusNoContent)
		case "GET /api/v1/vm.info":
			if polls++; polls == 3 && want.DesiredVCPUs != 0 {
				vcpus, ram = want.DesiredVCPUs, want.DesiredRAM
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"state": "Running", "memory_actual_size": ram,
				"config": map[string]any{"cpus": map[string]any{"boot_vcpus": vcpus, "max_vcpus": 4}, "memory": map[string]any{"size": 256 << 20}}})
		default:
			http.NotFound(w, r)
		}
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	cfg := resizableConfig()
	ch := chdriver.New("", hypervisor.Machine{GuestSize: cfg.GuestSize, Sockets: hypervisor.Sockets{Control: sock}}, zap.NewNop())
	h := Handler(NewResize(cfg, ch, 10*time.Second, zap.NewNop()).Routes)
	if code, s := call(t, h, http.MethodPut, `{"cpus":3,"memory":"768Mi"}`); code != http.StatusOK || s.CPUs != 3 || s.Memory != "768Mi" || s.MaxMemory != "1Gi" {
		t.Fatalf("grow: %d %+v", code, s)
	}
	if code, s := call(t, h, http.MethodGet, ""); code != http.StatusOK || s.CPUs != 3 || s.Memory != "768Mi" {
		t.Fatalf("GET: %d %+v", code, s)
	}
	if code, s := call(t, h, http.MethodPut, `{"cpus":1,"memory":"256Mi"}`); code != http.StatusOK || s.CPUs != 1 || s.Memory != "256Mi" {
		t.Fatalf("shrink: %d %+v", code, s)
	}
	if got := strings.Join(bodies, " "); got != `{"desired_vcpus":3,"desired_ram":805306368} {"desired_vcpus":1,"desired_ram":268435456}` {
		t.Errorf("vm.resize bodies %s", got)
	}
}

func machineForTest() hypervisor.Machine {
	return hypervisor.Machine{Acceleration: "tcg", GuestSize: vmv1.GuestSize{CPUs: 1, MaxCPUs: 4, MemoryMiB: 256, MaxMemoryMiB: 1024}}
}
