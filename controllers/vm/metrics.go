package vm

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Metrics are the controller's Prometheus metrics.
type Metrics struct {
	toPod     prometheus.Histogram
	toRunning prometheus.Histogram
	errors    *prometheus.CounterVec
	restarts  prometheus.Counter
	suspends  *prometheus.CounterVec
	hotplugs  *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	buckets := prometheus.ExponentialBuckets(0.05, 2, 14) // 50 ms .. ~7 min
	m := &Metrics{
		toPod: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "virtpod_vm_creation_to_pod_seconds",
			Help:    "Time from a VirtualMachine's creation to the creation of its first runner pod.",
			Buckets: buckets,
		}),
		toRunning: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "virtpod_vm_creation_to_running_seconds",
			Help:    "Time from a VirtualMachine's creation to its guest first running.",
			Buckets: buckets,
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtpod_vm_reconcile_errors_total",
			Help: "VirtualMachine reconcile errors by the step that failed; the work queue retries each with back-off.",
		}, []string{"step"}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "virtpod_vm_restarts_total",
			Help: "Guests the controller restarted after their run ended (runStrategy Always or RerunOnFailure), counted as status.restartCount is.",
		}),
		suspends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtpod_vm_suspend_transitions_total",
			Help: "Guests suspended (their state saved, result saved), resumed from a saved state (resumed), and saved states a run request discarded (discarded).",
		}, []string{"result"}),
		hotplugs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtpod_disk_hotplugs_total",
			Help: "Disks attached to and detached from running guests (op attach or detach), by result: attached, detached, or failed (each new failure the node agent reported).",
		}, []string{"op", "result"}),
	}
	reg.MustRegister(m.toPod, m.toRunning, m.errors, m.restarts, m.suspends, m.hotplugs)
	return m
}

func (m *Metrics) podCreated(vm *vmv1.VirtualMachine, now time.Time) {
	if m != nil {
		m.toPod.Observe(now.Sub(vm.CreationTimestamp.Time).Seconds())
	}
}

// observe records the first transition to Running: none after a run ended, was restarted or
// stopped (as far as status tells).
func (m *Metrics) observe(before, after *vmv1.VirtualMachine, now time.Time) {
	if m == nil || after.Status.RestartCount != 0 || after.Status.UserRestartCount != 0 || before.Status.LastTermination != nil {
		return
	}
	if before.Status.Phase != vmv1.PhaseRunning && after.Status.Phase == vmv1.PhaseRunning {
		m.toRunning.Observe(now.Sub(before.CreationTimestamp.Time).Seconds())
	}
}

func (m *Metrics) reconcileError(step string) {
	if m != nil {
		m.errors.WithLabelValues(step).Inc()
	}
}

func (m *Metrics) restarted() {
	if m != nil {
		m.restarts.Inc()
	}
}

// suspendTransition counts a suspend's step: saved, resumed or discarded.
func (m *Metrics) suspendTransition(result string) {
	if m != nil {
		m.suspends.WithLabelValues(result).Inc()
	}
}

// hotplugged counts a disk's attach or detach (op) by its result.
func (m *Metrics) hotplugged(op, result string) {
	if m != nil {
		m.hotplugs.WithLabelValues(op, result).Inc()
	}
}
