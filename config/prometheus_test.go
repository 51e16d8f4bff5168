package config_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/virtpod/virtpod/controllers/fleetmetrics"
	"github.com/virtpod/virtpod/controllers/migration"
	"github.com/virtpod/virtpod/controllers/snapshot"
	vmctrl "github.com/virtpod/virtpod/controllers/vm"
)

// documented are the metric names docs/metrics.md lists in its tables.
func documented(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		names = append(names, m[1])
	}
	if len(names) < 5 {
		t.Fatalf("docs/metrics.md lists only %q", names)
	}
	return names
}

// recorder is a Registerer that keeps what is registered with it.
type recorder struct{ collectors []prometheus.Collector }

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return nil
}
func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	r.collectors = append(r.collectors, cs...)
}
func (r *recorder) Unregister(prometheus.Collector) bool { return false }

// exported are the names of every metric virtpod's controller and node agent register.
func exported(t *testing.T) []string {
	t.Helper()
	rec := &recorder{}
	vmctrl.NewMetrics(rec)
	migration.NewMetrics(rec)
	snapshot.NewMetrics(rec)
	rec.MustRegister(fleetmetrics.Collector{})
	ch := make(chan *prometheus.Desc, 100)
	for _, c := range rec.collectors {
		c.Describe(ch)
	}
	close(ch)
	fq := regexp.MustCompile(`fqName: "([a-z_:]+)"`)
	var names []string
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		names = append(names, m[1])
	}
	// The node agent's metrics are constant descriptions in agent/network and agent/vmstats,
	// which this package cannot import without the node side's dependencies: read them from
	// the source.
	for _, file := range []string{"../agent/network/executor.go", "../agent/vmstats/metrics.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`prometheus\.NewDesc\("([a-z_]+)"`).FindAllStringSubmatch(string(src), -1) {
			names = append(names, m[1])
		}
	}
	return names
}

// TestMetricsDocumented: docs/metrics.md lists exactly the metrics virtpod exports.
func TestMetricsDocumented(t *testing.T) {
	doc, code := documented(t), exported(t)
	for _, n := range code {
		if !slices.Contains(doc, n) {
			t.Errorf("%s is exported but not in docs/metrics.md", n)
		}
	}
	for _, n := range doc {
		if !slices.Contains(code, n) {
			t.Errorf("docs/metrics.md lists %s, which nothing exports", n)
		}
	}
}

type ruleFile struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// TestPrometheusRule: every alert of the example PrometheusRule parses with Prometheus's PromQL
// parser, names only metrics virtpod exports (docs/metrics.md), has a valid `for` and a
// severity, and the alerts the operators' guide promises are there.
func TestPrometheusRule(t *testing.T) {
	b, err := os.ReadFile("prometheus/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(b, &rf); err != nil {
		t.Fatal(err)
	}
	if rf.APIVersion != "monitoring.coreos.com/v1" || rf.Kind != "PrometheusRule" || len(rf.Spec.Groups) == 0 {
		t.Fatalf("not a PrometheusRule with groups: %+v", rf)
	}
	doc := documented(t)
	var alerts []string
	for _, g := range rf.Spec.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			expr, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("%s: %q: %v", r.Alert, r.Expr, err)
				continue
			}
			if expr.Type() != parser.ValueTypeVector && expr.Type() != parser.ValueTypeScalar {
				t.Errorf("%s: %q is a %s, an alert needs an instant vector", r.Alert, r.Expr, expr.Type())
			}
			metrics := 0
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					metrics++
					if !slices.Contains(doc, vs.Name) {
						t.Errorf("%s: %s is no metric virtpod exports (docs/metrics.md)", r.Alert, vs.Name)
					}
				}
				return nil
			})
			if metrics == 0 {
				t.Errorf("%s: %q reads no metric", r.Alert, r.Expr)
			}
			if _, err := model.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
			}
			if r.Labels["severity"] == "" {
				t.Errorf("%s has no severity label", r.Alert)
			}
		}
	}
	for _, want := range []string{"VirtpodVMsFailing", "VirtpodVMRestartStorm", "VirtpodProviderUnavailable", "VirtpodNodeReportStale"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s in %q", want, alerts)
		}
	}
	if strings.Join(alerts, ",") != strings.Join(slices.Compact(slices.Clone(alerts)), ",") {
		t.Errorf("an alert name repeats: %q", alerts)
	}
}
