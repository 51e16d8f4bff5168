// Package heapprof reads a Go process's heap through its net/http/pprof endpoint (host:port),
// as the soaks judge leaks: after forced collections, and by the largest allocation sites
// when a soak fails.
package heapprof

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"time"
)

var client = &http.Client{Timeout: 30 * time.Second}

// Collect forces two collections (heap?gc=1, twice): the first leaves what sync.Pools hold
// (a metrics endpoint's gzip writers) in their victim caches, the second frees it.
func Collect(addr string) error {
	for range 2 {
		if _, err := heapProfile(addr); err != nil {
			return err
		}
	}
	return nil
}

// Top keeps a heap profile taken after a collection in a temporary file and returns
// `go tool pprof -top`'s view of its in-use space, and the file's path.
func Top(addr string) (top, file string, err error) {
	body, err := heapProfile(addr)
	if err != nil {
		return "", "", err
	}
	f, err := os.CreateTemp("", "virtpod-heap-*.pb.gz")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	if _, err := f.Write(body); err != nil {
		return "", "", err
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", "-sample_index=inuse_space", f.Name()).CombinedOutput()
	if err != nil {
		return "", f.Name(), fmt.Errorf("go tool pprof: %v: %s", err, out)
	}
	return string(out), f.Name(), nil
}

func heapProfile(addr string) ([]byte, error) {
	resp, err := client.Get("http://" + addr + "/debug/pprof/heap?gc=1")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("heap profile from %s: %s", addr, resp.Status)
	}
	return io.ReadAll(resp.Body)
}
