package config_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// grafanaVars are the dashboard's variables as Prometheus would see them once Grafana
// substituted them: a range for the rate interval; regex matchers keep their quotes.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// metricsOf parses expr with Prometheus's PromQL parser and returns the metrics it reads.
func metricsOf(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVars.Replace(expr))
	if err != nil {
		t.Errorf("%s: %q: %v", where, expr, err)
		return nil
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(vs.Name, "_bucket"), "_sum"), "_count"))
		}
		return nil
	})
	return names
}

// TestGrafanaDashboard: the shipped dashboard has its cluster, node and VM views; every query
// of every panel parses with Prometheus's PromQL parser and reads only metrics virtpod exports
// (docs/metrics.md), as do the variables' label_values queries; and the per-VM views read the
// node agents' metrics, which the shipped PodMonitor scrapes with their labels honoured.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("grafana/virtpod-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	doc := documented(t)
	var rows []string
	read := map[string]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				rows = append(rows, p.Title)
			} else if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				for _, m := range metricsOf(t, "panel "+p.Title, tg.Expr) {
					read[m] = true
					if !slices.Contains(doc, m) {
						t.Errorf("panel %q reads %s, which virtpod does not export (docs/metrics.md)", p.Title, m)
					}
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if !slices.Equal(rows, []string{"Cluster", "Node", "VM"}) {
		t.Errorf("rows %q, want the cluster, node and VM views", rows)
	}
	labelValues := regexp.MustCompile(`^label_values\((.+), *[a-z_]+\)$`)
	for _, v := range d.Templating.List {
		q, _ := v.Query.(map[string]any)
		if v.Type != "query" || q == nil {
			continue
		}
		m := labelValues.FindStringSubmatch(q["query"].(string))
		if m == nil {
			t.Errorf("variable %s: %q is no label_values query", v.Name, q["query"])
			continue
		}
		for _, name := range metricsOf(t, "variable "+v.Name, m[1]) {
			if !slices.Contains(doc, name) {
				t.Errorf("variable %s reads %s, which virtpod does not export", v.Name, name)
			}
		}
	}
	for _, m := range []string{"virtpod_vm_cpu_seconds_total", "virtpod_vm_memory_bytes", "virtpod_vm_disk_write_bytes_total", "virtpod_vm_network_receive_bytes_total", "virtpod_vms"} {
		if !read[m] {
			t.Errorf("no panel reads %s", m)
		}
	}

	// The agents' per-VM series keep their namespace and name only if scraped with honorLabels.
	pm, err := os.ReadFile("prometheus/podmonitors.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(pm), "\n---\n") {
		var mon struct {
			Kind     string                `json:"kind"`
			Metadata struct{ Name string } `json:"metadata"`
			Spec     struct {
				PodMetricsEndpoints []struct {
					Port        string `json:"port"`
					HonorLabels bool   `json:"honorLabels"`
				} `json:"podMetricsEndpoints"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &mon); err != nil {
			t.Fatal(err)
		}
		if mon.Kind != "PodMonitor" || len(mon.Spec.PodMetricsEndpoints) != 1 || !mon.Spec.PodMetricsEndpoints[0].HonorLabels || mon.Spec.PodMetricsEndpoints[0].Port != "metrics" {
			t.Errorf("podmonitors.yaml: %+v, want a PodMonitor scraping port metrics with honorLabels", mon)
		}
	}
}
