package promscrape

import (
	"strings"
	"testing"
)

// TestParse: a metric's series are summed over their labels; comments and help are skipped.
func TestParse(t *testing.T) {
	m, err := Parse(strings.NewReader(`# HELP rest_client_requests_total Requests.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",method="GET"} 3
rest_client_requests_total{code="201",method="POST"} 4
go_goroutines 202
workqueue_depth{name="a"} 0
workqueue_depth{name="b"} 2
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{"rest_client_requests_total": 7, "go_goroutines": 202, "workqueue_depth": 2} {
		if m[name] != want {
			t.Errorf("%s = %g, want %g", name, m[name], want)
		}
	}
}
