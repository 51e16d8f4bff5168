package nodeagent

import (
	"errors"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// metrics serves the spoof guards' counters (nx) and the VMs' (vs) with the Go runtime's and the
// process's own figures (heap, goroutines, open fds): what tells a leak in a long-running agent
// (make soak-node reads them).
func metrics(nx, vs prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(nx, vs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// profiles serves Go's profiles (/debug/pprof/).
func profiles() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	return mux
}

// serveHTTP serves h on addr until the returned stop is called, logging a server that fails.
func serveHTTP(addr string, h http.Handler, what string, log *zap.Logger) (stop func()) {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(what+" stopped", zap.String("addr", addr), zap.Error(err))
		}
	}()
	return func() { _ = srv.Close() }
}
