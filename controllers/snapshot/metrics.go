package snapshot

import (
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Metrics are the snapshot and restore controllers' Prometheus metrics, counted once per object
// when its terminal status is written.
type Metrics struct {
	snapshots *prometheus.CounterVec
	restores  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	copied    *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtpod_snapshots_total",
			Help: "VirtualMachineSnapshots that ended, by result (Ready, or the reason of the failure) and kind (full, incremental, offline).",
		}, []string{"result", "kind"}),
		restores: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtpod_restores_total",
			Help: "VirtualMachineRestores that ended, by result (Ready, or the reason of the failure) and kind (restore, clone).",
		}, []string{"result", "kind"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "virtpod_snapshot_duration_seconds",
			Help:    "Time from a snapshot's start to its end, for snapshots that succeeded, by kind (full, incremental, offline).",
			Buckets: prometheus.ExponentialBuckets(0.5, 2, 12), // 0.5 s .. ~17 min
		}, []string{"kind"}),
		copied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtpod_snapshot_copied_bytes_total",
			Help: "Bytes running guests' QEMUs read from their disks for snapshots that succeeded, by kind (full, incremental).",
		}, []string{"kind"}),
	}
	reg.MustRegister(m.snapshots, m.restores, m.duration, m.copied)
	return m
}

// snapshotKind is full, incremental or offline.
func snapshotKind(s *vmv1.VirtualMachineSnapshot) string {
	switch {
	case s.Status.SourcePod == "":
		return "offline"
	case s.Status.Base != "":
		return "incremental"
	}
	return "full"
}

func readyReason(conds []metav1.Condition) string {
	for _, c := range conds {
		if c.Type == vmv1.ConditionReady {
			return c.Reason
		}
	}
	return ""
}

func (m *Metrics) snapshotEnded(s *vmv1.VirtualMachineSnapshot) {
	if m == nil {
		return
	}
	kind := snapshotKind(s)
	m.snapshots.WithLabelValues(readyReason(s.Status.Conditions), kind).Inc()
	if s.Status.Phase != vmv1.SnapshotSucceeded {
		return
	}
	if s.Status.StartTime != nil && s.Status.CompletionTime != nil {
		m.duration.WithLabelValues(kind).Observe(s.Status.CompletionTime.Sub(s.Status.StartTime.Time).Seconds())
	}
	if kind != "offline" {
		var n int64
		for _, d := range s.Status.Disks {
			n += d.CopiedBytes
		}
		m.copied.WithLabelValues(kind).Add(float64(n))
	}
}

func (m *Metrics) restoreEnded(rs *vmv1.VirtualMachineRestore) {
	if m == nil {
		return
	}
	kind := "restore"
	if rs.Status.Clone {
		kind = "clone"
	}
	m.restores.WithLabelValues(readyReason(rs.Status.Conditions), kind).Inc()
}
