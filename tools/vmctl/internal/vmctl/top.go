package vmctl

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// agentMetricsPort is the node agent's metrics port (config/agent/daemonset.yaml, "metrics").
const agentMetricsPort = "9441"

func (a *app) topCmd() *cobra.Command {
	var o topOptions
	cmd := &cobra.Command{
		Use:   "top [VM]",
		Short: "Show running VMs' CPU, memory, disk and network rates",
		Long: `Show each running VM's CPU (cores), memory and disk and network rates, measured over --interval
from the node agents' per-VM metrics (docs/metrics.md), as kubectl top does from metrics-server.

It reads every node agent's /metrics through the API server's pod proxy, so it needs permission to
get pods/proxy in the agents' namespace (--agent-namespace, default virtpod-system): an
operator's view. Without VM it lists the namespace's running VMs (every namespace's with
--all-namespaces).`,
		Example:           "  vmctl top\n  vmctl top -A\n  vmctl -n prod top db-0 --interval 5s",
		Args:              maxArgs(1),
		ValidArgsFunction: a.completeVMs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.vm = args[0]
			}
			return a.top(o)
		},
	}
	cmd.Flags().DurationVar(&o.interval, "interval", 2*time.Second, "how long the rates are measured over")
	cmd.Flags().BoolVarP(&o.all, "all-namespaces", "A", false, "list the running VMs of every namespace")
	cmd.Flags().StringVar(&o.agentNamespace, "agent-namespace", "virtpod-system", "the namespace of the node agents (virtpod-agent)")
	return cmd
}

type topOptions struct {
	vm             string
	interval       time.Duration
	all            bool
	agentNamespace string
}

func (a *app) top(o topOptions) error {
	if o.interval < 500*time.Millisecond {
		return fmt.Errorf("--interval %v: at least 500ms, so the rates measure something", o.interval)
	}
	cn, err := a.connect()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout+o.interval)
	defer cancel()
	agents, err := cn.cs.CoreV1().Pods(o.agentNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=virtpod-agent"})
	if err != nil {
		return fmt.Errorf("listing the node agents in %s: %w", o.agentNamespace, err)
	}
	scrape := func() (map[vmKey]vmSample, error) {
		return scrapeAgents(ctx, agents.Items, func(ctx context.Context, pod string) (io.Reader, error) {
			b, err := cn.cs.CoreV1().Pods(o.agentNamespace).ProxyGet("http", pod, agentMetricsPort, "/metrics", nil).DoRaw(ctx)
			return strings.NewReader(string(b)), err
		})
	}
	first, err := scrape()
	if err != nil {
		return err
	}
	select {
	case <-time.After(o.interval):
	case <-ctx.Done():
		return ctx.Err()
	}
	second, err := scrape()
	if err != nil {
		return err
	}
	ns := cn.ns
	if o.all {
		ns = ""
	}
	rows := topRows(first, second, ns, o.vm)
	if o.vm != "" && len(rows) == 0 {
		return fmt.Errorf("VM %s/%s: no node agent reports it running (is it running? do the agents serve metrics, --metrics-addr?)", cn.ns, o.vm)
	}
	return renderTop(a.stdout, rows, o.all)
}

// vmKey is a VM; vmSample is what one scrape said of it, with the scrape's time.
type vmKey struct{ namespace, name string }

type vmSample struct {
	at                                       time.Time
	up                                       bool
	cpu, memory, diskRead, diskWrite, rx, tx float64
}

// scrapeAgents reads every running agent's metrics; an agent that does not answer is an error:
// its VMs would be missing from the table without a word.
func scrapeAgents(ctx context.Context, agents []corev1.Pod, get func(context.Context, string) (io.Reader, error)) (map[vmKey]vmSample, error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[vmKey]vmSample{}
	var errs []string
	for _, p := range agents {
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		wg.Go(func() {
			r, err := get(ctx, p.Name)
			var s map[vmKey]vmSample
			if err == nil {
				s, err = parseAgentMetrics(r, time.Now())
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Sprintf("node agent %s (node %s): %v", p.Name, p.Spec.NodeName, err))
				return
			}
			for k, v := range s {
				// A migrating VM has a runner on each node: the one that answered is the guest's.
				if old, ok := out[k]; !ok || !old.up {
					out[k] = v
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, fmt.Errorf("reading the node agents' metrics: %s", strings.Join(errs, "; "))
	}
	return out, nil
}

// parseAgentMetrics reads one agent's /metrics (Prometheus's text format) into its VMs' samples.
func parseAgentMetrics(r io.Reader, at time.Time) (map[vmKey]vmSample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := map[vmKey]vmSample{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			var k vmKey
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "namespace":
					k.namespace = l.GetValue()
				case "name":
					k.name = l.GetValue()
				}
			}
			if k.name == "" {
				continue
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			s := out[k]
			s.at = at
			switch name {
			case "virtpod_vm_stats_up":
				s.up = v == 1
			case "virtpod_vm_cpu_seconds_total":
				s.cpu = v
			case "virtpod_vm_memory_bytes":
				s.memory = v
			case "virtpod_vm_disk_read_bytes_total":
				s.diskRead += v
			case "virtpod_vm_disk_write_bytes_total":
				s.diskWrite += v
			case "virtpod_vm_network_receive_bytes_total":
				s.rx = v
			case "virtpod_vm_network_transmit_bytes_total":
				s.tx = v
			default:
				continue
			}
			out[k] = s
		}
	}
	return out, nil
}

// topRow is one VM's rates between two scrapes.
type topRow struct {
	vmKey
	cores, memory, diskRead, diskWrite, rx, tx float64
}

// topRows are the VMs both scrapes saw answering, in namespace (every one when "") and named vm
// (every one when ""), sorted; a counter that fell (a new hypervisor) counts from 0.
func topRows(first, second map[vmKey]vmSample, namespace, vm string) []topRow {
	var rows []topRow
	for k, b := range second {
		a, ok := first[k]
		if !ok || !a.up || !b.up || (namespace != "" && k.namespace != namespace) || (vm != "" && k.name != vm) {
			continue
		}
		dt := b.at.Sub(a.at).Seconds()
		if dt <= 0 {
			continue
		}
		rate := func(x, y float64) float64 {
			if y < x {
				x = 0
			}
			return (y - x) / dt
		}
		rows = append(rows, topRow{vmKey: k, cores: rate(a.cpu, b.cpu), memory: b.memory,
			diskRead: rate(a.diskRead, b.diskRead), diskWrite: rate(a.diskWrite, b.diskWrite), rx: rate(a.rx, b.rx), tx: rate(a.tx, b.tx)})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].namespace != rows[j].namespace {
			return rows[i].namespace < rows[j].namespace
		}
		return rows[i].name < rows[j].name
	})
	return rows
}

func renderTop(w io.Writer, rows []topRow, namespaces bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	head := "NAME\tCPU(cores)\tMEMORY\tDISK READ/s\tDISK WRITE/s\tNET RX/s\tNET TX/s"
	if namespaces {
		head = "NAMESPACE\t" + head
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		line := fmt.Sprintf("%s\t%.3f\t%s\t%s\t%s\t%s\t%s", r.name, r.cores, bytesIEC(r.memory), bytesIEC(r.diskRead), bytesIEC(r.diskWrite), bytesIEC(r.rx), bytesIEC(r.tx))
		if namespaces {
			line = r.namespace + "\t" + line
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// bytesIEC writes a byte count as kubectl top does memory: 0, 512Ki, 1.5Mi, 2Gi.
func bytesIEC(b float64) string {
	for _, u := range []struct {
		unit string
		size float64
	}{{"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if b >= u.size {
			return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", b/u.size), "0"), ".") + u.unit
		}
	}
	return fmt.Sprintf("%.0f", b)
}
