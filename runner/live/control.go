package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/resource"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// Size and SizeRequest are the control API's wire types (pkg/controlapi), shared with the node
// agent.
type (
	Size        = controlapi.Size
	SizeRequest = controlapi.SizeRequest
)

// DefaultResizeTimeout bounds how long a PUT waits for the guest to take a new size.
const DefaultResizeTimeout = 60 * time.Second

// Resize is live resize on the control API (GET and PUT /v1/size); resizes run one at a time.
type Resize struct {
	maxCPUs               int32
	bootMemMiB, maxMemMiB int64
	hv                    hypervisor.Resizer
	timeout               time.Duration
	log                   *zap.Logger
	mu                    sync.Mutex // held for a whole resize
	pending               atomic.Bool
}

// NewResize resizes hv within cfg's bounds, waiting up to timeout (0: DefaultResizeTimeout) for
// the guest to take a new size.
func NewResize(cfg runnerconfig.Config, hv hypervisor.Resizer, timeout time.Duration, log *zap.Logger) *Resize {
	if timeout <= 0 {
		timeout = DefaultResizeTimeout
	}
	return &Resize{maxCPUs: cfg.EffectiveMaxCPUs(), bootMemMiB: cfg.MemoryMiB, maxMemMiB: cfg.EffectiveMaxMemoryMiB(),
		hv: hv, timeout: timeout, log: log}
}

// Serve serves the control API, the routes each live operation (and the status board's
// /v1/started) registers, on the unix socket at path, readable and writable by its owner only,
// until stop.
func Serve(path string, routes ...func(*http.ServeMux)) (stop func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	_ = os.Remove(path) // a previous runner's socket in the same mount
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	srv := &http.Server{Handler: Handler(routes...), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return func() { _ = srv.Close(); _ = os.Remove(path) }, nil
}

// Handler is the control API of routes.
func Handler(routes ...func(*http.ServeMux)) http.Handler {
	mux := http.NewServeMux()
	for _, r := range routes {
		r(mux)
	}
	return mux
}

// Routes registers GET and PUT /v1/size.
func (c *Resize) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+controlapi.SizePath, func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		s, err := c.size(ctx)
		if err != nil {
			writeJSON(w, statusOf(err), Size{Error: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, s)
	})
	mux.HandleFunc("PUT "+controlapi.SizePath, c.put)
}

func (c *Resize) size(ctx context.Context) (Size, error) {
	cpus, mem, err := c.hv.GuestSize(ctx)
	if err != nil {
		return Size{}, err
	}
	return Size{CPUs: cpus, Memory: hypervisor.Quantity(mem), MaxCPUs: c.maxCPUs, MaxMemory: hypervisor.Quantity(c.maxMemMiB), Pending: c.pending.Load()}, nil
}

func (c *Resize) put(w http.ResponseWriter, r *http.Request) {
	var req SizeRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, Size{Error: "body: " + err.Error() + `; want {"cpus":N,"memory":"768Mi"}`})
		return
	}
	memMiB, err := c.validate(req)
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, Size{Error: oneLine(err)})
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending.Store(true)
	ctx, cancel := context.WithTimeout(r.Context(), c.timeout)
	start := time.Now()
	rerr := c.hv.Resize(ctx, req.CPUs, memMiB)
	cancel()
	c.pending.Store(false)
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	s, serr := c.size(sctx)
	switch {
	case rerr != nil:
		c.log.Warn("resize", zap.Int32("cpus", req.CPUs), zap.String("memory", req.Memory), zap.Error(rerr))
		s.Error = rerr.Error()
		writeJSON(w, statusOf(rerr), s)
	case serr != nil:
		writeJSON(w, statusOf(serr), Size{Error: serr.Error()})
	default:
		c.log.Info("resized", zap.Int32("cpus", s.CPUs), zap.String("memory", s.Memory), zap.Duration("took", time.Since(start)))
		writeJSON(w, http.StatusOK, s)
	}
}

// validate checks a request against the guest's bounds and returns its memory in MiB.
func (c *Resize) validate(req SizeRequest) (int64, error) {
	var errs []error
	if req.CPUs < 1 || req.CPUs > c.maxCPUs {
		errs = append(errs, fmt.Errorf("cpus: %d is outside 1..%d (maxCPUs)", req.CPUs, c.maxCPUs))
	}
	var mib int64
	q, err := resource.ParseQuantity(req.Memory)
	switch {
	case req.Memory == "":
		errs = append(errs, errors.New(`memory: required, a quantity such as "768Mi"`))
	case err != nil:
		errs = append(errs, fmt.Errorf("memory: %q is not a quantity (%v); use one such as \"768Mi\"", req.Memory, err))
	case q.Value()%vmv1.MemoryHotplugBlock != 0:
		errs = append(errs, fmt.Errorf("memory: %s is not a multiple of %dMi (the memory block)", req.Memory, vmv1.MemoryHotplugBlockMiB))
	default:
		mib = q.Value() >> 20
		if mib > c.maxMemMiB {
			errs = append(errs, fmt.Errorf("memory: %s is above maxMemory %s", req.Memory, hypervisor.Quantity(c.maxMemMiB)))
		} else if mib < c.bootMemMiB {
			errs = append(errs, fmt.Errorf("memory: %s is below the guest's boot memory %s, which cannot be unplugged", req.Memory, hypervisor.Quantity(c.bootMemMiB)))
		}
	}
	return mib, errors.Join(errs...)
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, hypervisor.ErrNotRunning), errors.Is(err, hypervisor.ErrRefused):
		return http.StatusConflict
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, hypervisor.ErrUnsupported):
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(v)
	_, _ = w.Write(append(b, '\n'))
}

// oneLine keeps errors.Join's lines on one line, for a JSON error field.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
