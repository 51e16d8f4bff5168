package status

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestStatusEndpoints(t *testing.T) {
	b := New("qemu", "tcg")
	b.Set(StateStarting, "")
	b.SetHypervisor("7.2.22", "")
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	code := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code("/healthz") != 200 || code("/readyz") != 503 || code("/startedz") != 503 {
		t.Fatal("before running: want /healthz 200, /readyz and /startedz 503")
	}
	b.Set(StateRunning, "")
	if code("/readyz") != 200 || code("/startedz") != 200 {
		t.Fatal("running: want /readyz and /startedz 200")
	}
	resp, err := http.Get(srv.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"state", "hypervisor", "version", "acceleration", "uptimeSeconds"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("/status lacks %q: %v", k, raw)
		}
	}
	if raw["state"] != "running" {
		t.Errorf("/status state %v", raw["state"])
	}
	b.Set(StateStopping, "received SIGTERM")
	if code("/readyz") != 503 || code("/startedz") != 503 {
		t.Fatal("stopping: want /readyz and /startedz 503")
	}
}

// TestStatusEndpointIsReadOnly: the runner's HTTP endpoint offers views and nothing else: every
// other method is refused and no other path exists (no debug or control handlers).
func TestStatusEndpointIsReadOnly(t *testing.T) {
	b := New("qemu", "tcg")
	b.Set(StateRunning, "")
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	for _, path := range []string{"/healthz", "/readyz", "/status"} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			req, _ := http.NewRequest(method, srv.URL+path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: %d, want 405", method, path, resp.StatusCode)
			}
		}
	}
	for _, path := range []string{"/", "/debug/pprof/", "/stop", "/qmp", "/console"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
}
