package vmstats

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The per-VM metrics (docs/metrics.md). Every one has the VM's namespace and name; a disk's
// also its drive (root, cidata, disk-<name>).
var (
	vmLabels   = []string{"namespace", "name"}
	diskLabels = []string{"namespace", "name", "drive"}

	upDesc = prometheus.NewDesc("virtpod_vm_stats_up",
		"1 when the VM's runner answered this scrape with the guest's counters, 0 when it did not (starting, stopping, or too slow).", vmLabels, nil)
	cpuDesc = prometheus.NewDesc("virtpod_vm_cpu_seconds_total",
		"CPU time the VM's hypervisor process used, its vCPUs and device emulation together.", vmLabels, nil)
	memDesc = prometheus.NewDesc("virtpod_vm_memory_bytes",
		"Memory the guest has: its boot memory and what was plugged since.", vmLabels, nil)
	diskReadBytes = prometheus.NewDesc("virtpod_vm_disk_read_bytes_total",
		"Bytes the guest read from the disk.", diskLabels, nil)
	diskWriteBytes = prometheus.NewDesc("virtpod_vm_disk_write_bytes_total",
		"Bytes the guest wrote to the disk.", diskLabels, nil)
	diskReadOps = prometheus.NewDesc("virtpod_vm_disk_read_ops_total",
		"Read requests the guest made of the disk.", diskLabels, nil)
	diskWriteOps = prometheus.NewDesc("virtpod_vm_disk_write_ops_total",
		"Write requests the guest made of the disk.", diskLabels, nil)
	netRxBytes = prometheus.NewDesc("virtpod_vm_network_receive_bytes_total",
		"Bytes the guest received on its network device.", vmLabels, nil)
	netTxBytes = prometheus.NewDesc("virtpod_vm_network_transmit_bytes_total",
		"Bytes the guest sent on its network device.", vmLabels, nil)
	netRxPackets = prometheus.NewDesc("virtpod_vm_network_receive_packets_total",
		"Packets the guest received on its network device.", vmLabels, nil)
	netTxPackets = prometheus.NewDesc("virtpod_vm_network_transmit_packets_total",
		"Packets the guest sent on its network device.", vmLabels, nil)

	descs = []*prometheus.Desc{upDesc, cpuDesc, memDesc, diskReadBytes, diskWriteBytes, diskReadOps, diskWriteOps,
		netRxBytes, netTxBytes, netRxPackets, netTxPackets}
)

// collect sends one runner's answer: up, and its counters when it answered.
func collect(ch chan<- prometheus.Metric, a answer) {
	vm := []string{a.namespace, a.vm}
	if a.err != nil || a.stats.Error != "" {
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 0, vm...)
		return
	}
	s := a.stats
	ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 1, vm...)
	ch <- prometheus.MustNewConstMetric(cpuDesc, prometheus.CounterValue, s.CPUSeconds, vm...)
	ch <- prometheus.MustNewConstMetric(memDesc, prometheus.GaugeValue, float64(s.MemoryBytes), vm...)
	for _, d := range s.Disks {
		disk := []string{a.namespace, a.vm, d.Drive}
		ch <- prometheus.MustNewConstMetric(diskReadBytes, prometheus.CounterValue, float64(d.ReadBytes), disk...)
		ch <- prometheus.MustNewConstMetric(diskWriteBytes, prometheus.CounterValue, float64(d.WriteBytes), disk...)
		ch <- prometheus.MustNewConstMetric(diskReadOps, prometheus.CounterValue, float64(d.ReadOps), disk...)
		ch <- prometheus.MustNewConstMetric(diskWriteOps, prometheus.CounterValue, float64(d.WriteOps), disk...)
	}
	if n := s.Network; n != nil {
		ch <- prometheus.MustNewConstMetric(netRxBytes, prometheus.CounterValue, float64(n.RxBytes), vm...)
		ch <- prometheus.MustNewConstMetric(netTxBytes, prometheus.CounterValue, float64(n.TxBytes), vm...)
		ch <- prometheus.MustNewConstMetric(netRxPackets, prometheus.CounterValue, float64(n.RxPackets), vm...)
		ch <- prometheus.MustNewConstMetric(netTxPackets, prometheus.CounterValue, float64(n.TxPackets), vm...)
	}
}
