package vmstats

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"

	"github.com/virtpod/virtpod/agent/podcontrol/podcontroltest"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

// scrape gathers the executor's metrics as Prometheus would, as "name{labels} value" lines.
func scrape(t *testing.T, e *Executor) []string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(e)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			lines = append(lines, f.GetName()+labelsOf(m)+" "+value(m))
		}
	}
	sort.Strings(lines)
	return lines
}

func labelsOf(m *dto.Metric) string {
	var l []string
	for _, p := range m.GetLabel() {
		l = append(l, p.GetName()+"="+p.GetValue())
	}
	return "{" + strings.Join(l, ",") + "}"
}

func value(m *dto.Metric) string {
	if c := m.GetCounter(); c != nil {
		return fmt.Sprint(c.GetValue())
	}
	return fmt.Sprint(m.GetGauge().GetValue())
}

// TestScrapeAsksEachRunningGuest: a scrape asks the runner of each running pod a VM names on
// the node, at the scrape and only then, and exports its counters under the VM's namespace and
// name (a disk's also under its drive); a runner that does not answer in time is down, not
// waited for; pods no VM names, other nodes' pods and deleted pods are not asked.
func TestScrapeAsksEachRunningGuest(t *testing.T) {
	ns := podcontroltest.Namespace(t, env.Client, "vmstats-")
	web := podcontroltest.RunnerPod(t, env.Client, ns, "web", "node-a", false, "--name=web")
	slow := podcontroltest.RunnerPod(t, env.Client, ns, "slow", "node-a", false, "--name=slow")
	foreign := podcontroltest.RunnerPod(t, env.Client, ns, "foreign", "node-a", true, "--name=foreign")
	far := podcontroltest.RunnerPod(t, env.Client, ns, "far", "node-b", false, "--name=far")
	node := podcontroltest.NewNode(t, "node-a")
	runners := map[string]*podcontroltest.Runner{}
	for _, p := range []*corev1.Pod{web, slow, foreign, far} {
		runners[p.Name] = &podcontroltest.Runner{}
		node.Serve(t, p, "ctl-"+p.Name, runners[p.Name])
	}
	runners["web"].Answer(http.MethodGet, controlapi.StatsPath, http.StatusOK, controlapi.Stats{
		CPUSeconds: 12.5, MemoryBytes: 256 << 20,
		Disks:   []controlapi.DiskStats{{Drive: "root", ReadBytes: 4096, WriteBytes: 1 << 20, ReadOps: 1, WriteOps: 256}},
		Network: &controlapi.NetworkStats{RxBytes: 1500, TxBytes: 3000, RxPackets: 1, TxPackets: 2},
	})
	runners["slow"].Hold()
	defer runners["slow"].Release()
	e := &Executor{Agent: node.Agent(t, env), Timeout: 500 * time.Millisecond}
	podcontroltest.Run(t, e.Run)

	up := func(vm string) string { return "virtpod_vm_stats_up{name=" + vm + ",namespace=" + ns + "}" }
	var got []string
	kubeapi.Eventually(t, "both running guests of node-a scraped", 20*time.Second, func() error {
		got = scrape(t, e)
		if !contains(got, up("web")+" 1") || !contains(got, up("slow")+" 0") {
			return fmt.Errorf("scraped %q", got)
		}
		return nil
	})
	for _, want := range []string{
		"virtpod_vm_cpu_seconds_total{name=web,namespace=" + ns + "} 12.5",
		"virtpod_vm_memory_bytes{name=web,namespace=" + ns + "} 2.68435456e+08",
		"virtpod_vm_disk_write_bytes_total{drive=root,name=web,namespace=" + ns + "} 1.048576e+06",
		"virtpod_vm_disk_write_ops_total{drive=root,name=web,namespace=" + ns + "} 256",
		"virtpod_vm_disk_read_bytes_total{drive=root,name=web,namespace=" + ns + "} 4096",
		"virtpod_vm_network_transmit_bytes_total{name=web,namespace=" + ns + "} 3000",
		"virtpod_vm_network_receive_packets_total{name=web,namespace=" + ns + "} 1",
	} {
		if !contains(got, want) {
			t.Errorf("scrape lacks %q:\n%s", want, strings.Join(got, "\n"))
		}
	}
	for _, l := range got {
		if strings.Contains(l, "name=foreign") || strings.Contains(l, "name=far") {
			t.Errorf("a pod not the node's or no VM's is exported: %s", l)
		}
	}
	if runners["foreign"].Count(http.MethodGet, controlapi.StatsPath) != 0 || runners["far"].Count(http.MethodGet, controlapi.StatsPath) != 0 {
		t.Error("a runner of a pod no VM names, or of another node, was asked")
	}

	// Between scrapes nobody is asked.
	asked := runners["web"].Count(http.MethodGet, controlapi.StatsPath)
	time.Sleep(time.Second)
	if n := runners["web"].Count(http.MethodGet, controlapi.StatsPath); n != asked {
		t.Errorf("web's runner was asked %d times between scrapes", n-asked)
	}

	// A deleted pod's VM leaves the metrics at the next scrape.
	if err := env.Client.Delete(context.Background(), web); err != nil {
		t.Fatal(err)
	}
	kubeapi.Eventually(t, "web gone from the scrape", 20*time.Second, func() error {
		for _, l := range scrape(t, e) {
			if strings.Contains(l, "name=web") {
				return fmt.Errorf("still scraped: %s", l)
			}
		}
		return nil
	})
}

func contains(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}
