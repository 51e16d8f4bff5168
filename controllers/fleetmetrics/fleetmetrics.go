// Package fleetmetrics exports the state of the fleet as Prometheus gauges — VMs by phase, each
// ProviderClass's availability and ready nodes, each node agent's last heartbeat — read from the
// controller's cache when scraped, so they cost the API server nothing and are never stale.
// docs/metrics.md lists them; config/prometheus alerts on them.
package fleetmetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

var (
	vmsDesc = prometheus.NewDesc("virtpod_vms",
		"VirtualMachines by status.phase (Unknown before the controller set one).", []string{"phase"}, nil)
	availableDesc = prometheus.NewDesc("virtpod_providerclass_available",
		"1 when the ProviderClass's Available condition is True (enabled, and some node runs it), else 0.", []string{"providerclass"}, nil)
	enabledDesc = prometheus.NewDesc("virtpod_providerclass_enabled",
		"1 when the ProviderClass is enabled (spec.enabled), else 0.", []string{"providerclass"}, nil)
	readyNodesDesc = prometheus.NewDesc("virtpod_providerclass_ready_nodes",
		"Nodes with a fresh node-agent report on which the ProviderClass's hypervisor runs (status.readyNodes).", []string{"providerclass"}, nil)
	heartbeatDesc = prometheus.NewDesc("virtpod_hypervisornode_heartbeat_timestamp_seconds",
		"When the node agent last probed its node (HypervisorNode status.heartbeatTime), in Unix seconds; a report older than 2 minutes is stale.", []string{"node"}, nil)
	scrapeErrorDesc = prometheus.NewDesc("virtpod_fleet_scrape_errors",
		"1 when the last scrape could not list a kind from the cache (its other gauges are then missing), by kind.", []string{"kind"}, nil)
)

// phases are every VirtualMachine phase (apis/vm/v1alpha1).
var phases = []vmv1.Phase{vmv1.PhasePending, vmv1.PhaseScheduling, vmv1.PhaseStarting, vmv1.PhaseRunning,
	vmv1.PhaseStopping, vmv1.PhaseStopped, vmv1.PhaseSucceeded, vmv1.PhaseFailed}

// Collector reads the fleet from Reader (the manager's cache) at each scrape.
type Collector struct {
	Reader client.Reader
}

// Describe implements prometheus.Collector.
func (c Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{vmsDesc, availableDesc, enabledDesc, readyNodesDesc, heartbeatDesc, scrapeErrorDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	failed := func(kind string, err error) {
		v := 0.0
		if err != nil {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, v, kind)
	}

	vms := &vmv1.VirtualMachineList{}
	err := c.Reader.List(ctx, vms)
	failed("VirtualMachine", err)
	if err == nil {
		// Every phase is exported, 0 included, so an alert on one never sees it vanish.
		count := map[string]float64{"Unknown": 0}
		for _, p := range phases {
			count[string(p)] = 0
		}
		for _, vm := range vms.Items {
			p := string(vm.Status.Phase)
			if p == "" {
				p = "Unknown"
			}
			count[p]++
		}
		for p, n := range count {
			ch <- prometheus.MustNewConstMetric(vmsDesc, prometheus.GaugeValue, n, p)
		}
	}

	classes := &vmv1.ProviderClassList{}
	err = c.Reader.List(ctx, classes)
	failed("ProviderClass", err)
	if err == nil {
		for _, pc := range classes.Items {
			v := 0.0
			if meta.IsStatusConditionTrue(pc.Status.Conditions, vmv1.ConditionAvailable) {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(availableDesc, prometheus.GaugeValue, v, pc.Name)
			enabled := 0.0
			if pc.Spec.Enabled == nil || *pc.Spec.Enabled {
				enabled = 1
			}
			ch <- prometheus.MustNewConstMetric(enabledDesc, prometheus.GaugeValue, enabled, pc.Name)
			ch <- prometheus.MustNewConstMetric(readyNodesDesc, prometheus.GaugeValue, float64(pc.Status.ReadyNodes), pc.Name)
		}
	}

	nodes := &vmv1.HypervisorNodeList{}
	err = c.Reader.List(ctx, nodes)
	failed("HypervisorNode", err)
	if err == nil {
		for _, n := range nodes.Items {
			if hb := n.Status.HeartbeatTime; !hb.IsZero() {
				ch <- prometheus.MustNewConstMetric(heartbeatDesc, prometheus.GaugeValue, seconds(hb), n.Name)
			}
		}
	}
}

func seconds(t metav1.Time) float64 { return float64(t.UnixNano()) / 1e9 }
