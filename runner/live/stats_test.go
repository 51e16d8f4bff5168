package live

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// meteredGuest is a hypervisor that counts; running false answers as one not started yet.
type meteredGuest struct {
	hypervisor.Hypervisor // the methods stats and screenshots do not call
	running               bool
	screen                []byte // a PPM Screendump writes; nil: no display
}

func (g *meteredGuest) GuestSize(context.Context) (int32, int64, error) {
	if !g.running {
		return 0, 0, hypervisor.ErrNotRunning
	}
	return 2, 768, nil
}

func (g *meteredGuest) Resize(context.Context, int32, int64) error { return nil }

func (g *meteredGuest) CPUSeconds() (float64, error) { return 12.5, nil }

func (g *meteredGuest) DiskStats(context.Context) ([]controlapi.DiskStats, error) {
	return []controlapi.DiskStats{{Drive: "root", ReadBytes: 1, WriteBytes: 2, ReadOps: 3, WriteOps: 4}}, nil
}

func (g *meteredGuest) Screendump(_ context.Context, path string) error {
	switch {
	case !g.running:
		return hypervisor.ErrNotRunning
	case g.screen == nil:
		return hypervisor.ErrNoDisplay
	}
	return os.WriteFile(path, g.screen, 0o600)
}

// TestStats: the counters of a running guest, its network's from the guest's side of the tap
// (the tap's receive is the guest's transmit); a guest that does not run yet answers 409.
func TestStats(t *testing.T) {
	sys := t.TempDir()
	stats := filepath.Join(sys, "vptap0", "statistics")
	if err := os.MkdirAll(stats, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"rx_bytes": "1000\n", "tx_bytes": "2000\n", "rx_packets": "10\n", "tx_packets": "20\n"} {
		if err := os.WriteFile(filepath.Join(stats, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := &meteredGuest{}
	s := NewStats(g, "vptap0")
	s.net = sys
	code, st := getStats(t, Handler(s.Routes))
	if code != http.StatusConflict || st.Error != hypervisor.ErrNotRunning.Error() {
		t.Errorf("before the guest runs: %d %+v, want 409 and why", code, st)
	}
	g.running = true
	code, st = getStats(t, Handler(s.Routes))
	want := controlapi.Stats{CPUSeconds: 12.5, MemoryBytes: 768 << 20,
		Disks:   []controlapi.DiskStats{{Drive: "root", ReadBytes: 1, WriteBytes: 2, ReadOps: 3, WriteOps: 4}},
		Network: &controlapi.NetworkStats{RxBytes: 2000, TxBytes: 1000, RxPackets: 20, TxPackets: 10}}
	if code != http.StatusOK || !reflect.DeepEqual(st, want) {
		t.Errorf("a running guest: %d %+v (network %+v), want %+v", code, st, st.Network, want)
	}
	if code, st := getStats(t, Handler(NewStats(plainHypervisor{}, "").Routes)); code != http.StatusConflict || st.Error == "" {
		t.Errorf("a hypervisor that counts nothing: %d %+v, want 409 and why", code, st)
	}
	// Without a network there is no tap and no network counters.
	if _, st := getStats(t, Handler(NewStats(g, "").Routes)); st.Network != nil || st.Error != "" {
		t.Errorf("a guest without a network: %+v", st)
	}
}

func getStats(t *testing.T, h http.Handler) (int, controlapi.Stats) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, controlapi.StatsPath, nil))
	var st controlapi.Stats
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("GET %s: %q: %v", controlapi.StatsPath, rec.Body, err)
	}
	return rec.Code, st
}
