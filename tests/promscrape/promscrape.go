// Package promscrape reads a process's Prometheus metrics endpoint for tests and benchmarks:
// each metric summed over its labels, which is what they compare (requests made, goroutines,
// heap, queue depth).
package promscrape

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Sums fetches http://addr/metrics and returns each metric's value summed over its labels.
func Sums(addr string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET http://%s/metrics: %s", addr, resp.Status)
	}
	return Parse(resp.Body)
}

// Parse sums each metric of the Prometheus text format over its labels.
func Parse(r io.Reader) (map[string]float64, error) {
	m := map[string]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(f[0], "{")
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		m[name] += v
	}
	return m, sc.Err()
}
