package runner

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestKernelCmdline(t *testing.T) {
	for _, tc := range []struct{ user, ip, want string }{
		{"", "", "console=ttyS0 root=/dev/vda no_timer_check"},
		{"rw quiet", "ip=10.0.0.2::10.0.0.1:255.255.255.0:vm:eth0:off", "console=ttyS0 root=/dev/vda no_timer_check rw quiet ip=10.0.0.2::10.0.0.1:255.255.255.0:vm:eth0:off"},
		// The VM's own choices win.
		{"console=hvc0 root=/dev/vda1 ip=dhcp", "ip=10.0.0.2::10.0.0.1:255.255.255.0:vm:eth0:off", "no_timer_check console=hvc0 root=/dev/vda1 ip=dhcp"},
		{"no_timer_check", "", "console=ttyS0 root=/dev/vda no_timer_check"},
		// "rootwait" is not root=.
		{"rootwait", "", "console=ttyS0 root=/dev/vda no_timer_check rootwait"},
	} {
		if got := kernelCmdline(tc.user, tc.ip, false); got != tc.want {
			t.Errorf("kernelCmdline(%q, %q) = %q, want %q", tc.user, tc.ip, got, tc.want)
		}
	}
}

func TestStatusEndpoints(t *testing.T) {
	b := &statusBoard{s: Status{State: StateStarting, Hypervisor: "qemu", Acceleration: "tcg", Version: "7.2.22"}}
	srv := httptest.NewServer(b.handler())
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
	b.set(StateRunning, "")
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
	b.set(StateStopping, "received SIGTERM")
	if code("/readyz") != 503 || code("/startedz") != 503 {
		t.Fatal("stopping: want /readyz and /startedz 503")
	}
}

// TestStatusEndpointIsReadOnly: the runner's HTTP endpoint offers views and nothing else: every
// other method is refused and no other path exists (no debug or control handlers).
func TestStatusEndpointIsReadOnly(t *testing.T) {
	b := &statusBoard{s: Status{State: StateRunning}}
	srv := httptest.NewServer(b.handler())
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

// TestKernelCmdlineHotplugMemory: a guest with hotpluggable memory onlines it in the kernel,
// movable where the ratio allows, unless the VM's own arguments choose otherwise.
func TestKernelCmdlineHotplugMemory(t *testing.T) {
	for user, want := range map[string]string{
		"rw":                                 "console=ttyS0 root=/dev/vda no_timer_check rw memhp_default_state=online memory_hotplug.online_policy=auto-movable",
		"memhp_default_state=online_movable": "console=ttyS0 root=/dev/vda no_timer_check memhp_default_state=online_movable",
	} {
		if got := kernelCmdline(user, "", true); got != want {
			t.Errorf("kernelCmdline(%q, hotplug) = %q, want %q", user, got, want)
		}
	}
}
