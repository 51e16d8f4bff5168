package migration

import (
	"github.com/prometheus/client_golang/prometheus"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Metrics are the migration controller's Prometheus metrics, counted once per migration when its
// terminal status is written.
type Metrics struct {
	total       *prometheus.CounterVec
	duration    prometheus.Histogram
	downtime    prometheus.Histogram
	transferred prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtpod_migrations_total",
			Help: "Live migrations that ended, by result: Succeeded, or the reason of the failure (TargetUnschedulable, StreamBroken, Timeout, ...).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "virtpod_migration_duration_seconds",
			Help:    "Time from a live migration's start to the guest running on the target, for migrations that succeeded.",
			Buckets: prometheus.ExponentialBuckets(0.5, 2, 12), // 0.5 s .. ~17 min
		}),
		downtime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "virtpod_migration_downtime_seconds",
			Help:    "How long the guest was paused for the switch, as QEMU reports it, for migrations that succeeded.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12), // 5 ms .. ~10 s
		}),
		transferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "virtpod_migration_transferred_bytes_total",
			Help: "Bytes of guest memory and disk the source runners sent, as QEMU reports them, over all migrations that ended.",
		}),
	}
	reg.MustRegister(m.total, m.duration, m.downtime, m.transferred)
	return m
}

func (m *Metrics) ended(mig *vmv1.VirtualMachineMigration) {
	if m == nil {
		return
	}
	st := mig.Status
	result := string(st.Phase)
	for _, c := range st.Conditions {
		if c.Type == vmv1.ConditionCompleted {
			result = c.Reason
		}
	}
	m.total.WithLabelValues(result).Inc()
	m.transferred.Add(float64(st.TransferredBytes))
	if st.Phase != vmv1.MigrationSucceeded {
		return
	}
	if st.StartTime != nil && st.CompletionTime != nil {
		m.duration.Observe(st.CompletionTime.Sub(st.StartTime.Time).Seconds())
	}
	m.downtime.Observe(float64(st.DowntimeMs) / 1000)
}
