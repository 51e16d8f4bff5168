package live

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// netClass is where the kernel counts each interface of the runner's network namespace (the
// pod's, where the tap is).
const netClass = "/sys/class/net"

// Stats is GET /v1/stats: the guest's counters, read at each request from the hypervisor (its
// process's CPU time, the guest's memory, its disks' I/O) and from the tap.
type Stats struct {
	size  hypervisor.Resizer
	meter hypervisor.Meter // nil: the hypervisor counts no CPU time or disk I/O
	tap   string           // "" for a guest without a network
	net   string           // netClass; a test's directory
}

// NewStats reads hv's counters and those of the guest's tap ("" for none).
func NewStats(hv hypervisor.Hypervisor, tap string) *Stats {
	s := &Stats{tap: tap, net: netClass}
	s.size, _ = hv.(hypervisor.Resizer)
	s.meter, _ = hv.(hypervisor.Meter)
	return s
}

// Routes registers GET /v1/stats.
func (s *Stats) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+controlapi.StatsPath, func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		st, err := s.read(ctx)
		if err != nil {
			st.Error = oneLine(err)
			writeJSON(w, statusOf(err), st)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
}

// read gathers the counters; a guest that is not running has none (ErrNotRunning).
func (s *Stats) read(ctx context.Context) (controlapi.Stats, error) {
	var st controlapi.Stats
	if s.size == nil || s.meter == nil {
		return st, fmt.Errorf("%w: the hypervisor reports no counters", hypervisor.ErrRefused)
	}
	_, memMiB, err := s.size.GuestSize(ctx)
	if err != nil {
		return st, err
	}
	st.MemoryBytes = memMiB << 20
	var errs []error
	if st.CPUSeconds, err = s.meter.CPUSeconds(); err != nil {
		errs = append(errs, fmt.Errorf("cpu: %w", err))
	}
	if st.Disks, err = s.meter.DiskStats(ctx); err != nil {
		errs = append(errs, fmt.Errorf("disks: %w", err))
	}
	if s.tap != "" {
		if st.Network, err = tapStats(s.net, s.tap); err != nil {
			errs = append(errs, fmt.Errorf("network: %w", err))
		}
	}
	return st, errors.Join(errs...)
}

// tapStats are the guest's network counters from its tap's, in the guest's words: what QEMU
// writes into the tap (the guest's transmit) is the tap's receive, and the other way round.
func tapStats(netClass, tap string) (*controlapi.NetworkStats, error) {
	dir := filepath.Join(netClass, tap, "statistics")
	var v [4]int64
	for i, name := range []string{"tx_bytes", "rx_bytes", "tx_packets", "rx_packets"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if v[i], err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return nil, fmt.Errorf("%s/%s: %w", dir, name, err)
		}
	}
	return &controlapi.NetworkStats{RxBytes: v[0], TxBytes: v[1], RxPackets: v[2], TxPackets: v[3]}, nil
}
