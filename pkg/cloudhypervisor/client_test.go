package cloudhypervisor

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeVMM serves the endpoints the client uses the way cloud-hypervisor's OpenAPI description
// states them: PUT for actions (204 on success), GET for vmm.ping and vm.info, 404 before
// vm.create, 405 for actions the VM's state does not allow, and a strict VmConfig decoder that
// refuses fields the API does not define or required fields that are missing.
type fakeVMM struct {
	mu      sync.Mutex
	state   string // "" until created
	config  map[string]any
	calls   []string
	stopped bool
	// What vm.create configured and vm.resize changed, reported by vm.info.
	vcpus, maxVCPUs int
	ram, maxRAM     int64
}

// apiVMConfig lists the VmConfig fields the published API defines and the client may send.
type apiVMConfig struct {
	CPUs *struct {
		BootVCPUs *int `json:"boot_vcpus"`
		MaxVCPUs  *int `json:"max_vcpus"`
	} `json:"cpus"`
	Memory *struct {
		Size          *int64 `json:"size"`
		HotplugSize   int64  `json:"hotplug_size"`
		HotplugMethod string `json:"hotplug_method"`
	} `json:"memory"`
	Payload *struct {
		Kernel    string `json:"kernel"`
		Cmdline   string `json:"cmdline"`
		Initramfs string `json:"initramfs"`
		Firmware  string `json:"firmware"`
	} `json:"payload"`
	Disks []struct {
		ID           string `json:"id"`
		Path         string `json:"path"`
		Readonly     bool   `json:"readonly"`
		Direct       bool   `json:"direct"`
		ImageType    string `json:"image_type"`
		BackingFiles bool   `json:"backing_files"`
	} `json:"disks"`
	Net []struct {
		ID  string `json:"id"`
		Tap string `json:"tap"`
		MAC string `json:"mac"`
		MTU int    `json:"mtu"`
	} `json:"net"`
	Serial  *struct{ Mode, Socket, File string } `json:"serial"`
	Console *struct{ Mode, Socket, File string } `json:"console"`
	Pvpanic bool                                 `json:"pvpanic"`
}

func (f *fakeVMM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ep := strings.TrimPrefix(r.URL.Path, "/api/v1/")
	f.calls = append(f.calls, r.Method+" "+ep)
	want := map[string]string{"vmm.ping": "GET", "vm.info": "GET"}[ep]
	if want == "" {
		want = "PUT"
	}
	if r.Method != want {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch ep {
	case "vmm.ping":
		_ = json.NewEncoder(w).Encode(map[string]any{"version": "v44.0", "build_version": "v44.0", "pid": 42})
	case "vm.create":
		if f.state != "" {
			http.Error(w, "VM already created", http.StatusInternalServerError)
			return
		}
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		var c apiVMConfig
		if err := dec.Decode(&c); err != nil {
			http.Error(w, "invalid VmConfig: "+err.Error(), http.StatusBadRequest)
			return
		}
		if c.Payload == nil || c.CPUs == nil || c.CPUs.BootVCPUs == nil || c.CPUs.MaxVCPUs == nil || c.Memory == nil || c.Memory.Size == nil {
			http.Error(w, "invalid VmConfig: payload, cpus.boot_vcpus, cpus.max_vcpus and memory.size are required", http.StatusBadRequest)
			return
		}
		if *c.CPUs.BootVCPUs < 1 || *c.CPUs.MaxVCPUs < *c.CPUs.BootVCPUs {
			http.Error(w, "invalid VmConfig: cpus.boot_vcpus must be at least 1 and at most max_vcpus", http.StatusBadRequest)
			return
		}
		for _, mode := range []*struct{ Mode, Socket, File string }{c.Serial, c.Console} {
			if mode != nil && !strings.Contains(" Off Pty Tty File Socket Null ", " "+mode.Mode+" ") {
				http.Error(w, "invalid ConsoleMode "+mode.Mode, http.StatusBadRequest)
				return
			}
		}
		if m := c.Memory.HotplugMethod; m != "" && m != "Acpi" && m != "VirtioMem" {
			http.Error(w, "invalid HotplugMethod "+m, http.StatusBadRequest)
			return
		}
		f.vcpus, f.maxVCPUs, f.ram, f.maxRAM = *c.CPUs.BootVCPUs, *c.CPUs.MaxVCPUs, *c.Memory.Size, *c.Memory.Size+c.Memory.HotplugSize
		f.state = StateCreated
		w.WriteHeader(http.StatusNoContent)
	case "vm.resize":
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		var rs struct {
			DesiredVCPUs   *int   `json:"desired_vcpus"`
			DesiredRAM     *int64 `json:"desired_ram"`
			DesiredBalloon *int64 `json:"desired_balloon"`
		}
		if err := dec.Decode(&rs); err != nil {
			http.Error(w, "invalid VmResize: "+err.Error(), http.StatusBadRequest)
			return
		}
		if f.state != StateRunning {
			http.Error(w, "VM not booted", http.StatusMethodNotAllowed)
			return
		}
		if rs.DesiredVCPUs != nil && (*rs.DesiredVCPUs < 1 || *rs.DesiredVCPUs > f.maxVCPUs) {
			http.Error(w, "desired_vcpus beyond max_vcpus", http.StatusInternalServerError)
			return
		}
		if rs.DesiredRAM != nil && *rs.DesiredRAM > f.maxRAM {
			http.Error(w, "desired_ram beyond size + hotplug_size", http.StatusInternalServerError)
			return
		}
		if rs.DesiredVCPUs != nil {
			f.vcpus = *rs.DesiredVCPUs
		}
		if rs.DesiredRAM != nil {
			f.ram = *rs.DesiredRAM
		}
		w.WriteHeader(http.StatusNoContent)
	case "vm.boot":
		if f.state == "" {
			http.Error(w, "VM not created", http.StatusNotFound)
			return
		}
		f.state = StateRunning
		w.WriteHeader(http.StatusNoContent)
	case "vm.info":
		if f.state == "" {
			http.Error(w, "VM not created", http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"state": f.state, "memory_actual_size": f.ram,
			"config": map[string]any{"payload": map[string]any{}, "cpus": map[string]any{"boot_vcpus": f.vcpus, "max_vcpus": f.maxVCPUs}}})
	case "vm.power-button", "vm.shutdown":
		if f.state == "" {
			http.Error(w, "VM not created", http.StatusNotFound)
			return
		}
		if f.state != StateRunning {
			http.Error(w, "VM not booted", http.StatusMethodNotAllowed)
			return
		}
		f.state = StateShutdown
		w.WriteHeader(http.StatusNoContent)
	case "vmm.shutdown":
		f.stopped = true
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

func startFake(t *testing.T) (*fakeVMM, *Client) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "ch.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeVMM{}
	srv := &http.Server{Handler: f}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return f, NewClient(sock)
}

func TestClientLifecycle(t *testing.T) {
	f, c := startFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	ping, err := c.Ping(ctx)
	if err != nil || ping.Version != "v44.0" {
		t.Fatalf("Ping = %+v, %v", ping, err)
	}
	// Before vm.create the API answers 404, and the client says which endpoint and why.
	_, err = c.Info(ctx)
	var apiErr *Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound || !strings.Contains(err.Error(), "vm.info") {
		t.Fatalf("Info before create: %v", err)
	}
	cfg, err := Build(baseSpec())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.PowerButton(ctx); err == nil || !strings.Contains(err.Error(), "405") {
		t.Fatalf("power button before boot: %v, want HTTP 405", err)
	}
	if err := c.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil || info.State != StateRunning {
		t.Fatalf("Info after boot = %+v, %v", info, err)
	}
	if err := c.PowerButton(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.ShutdownVMM(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	got := strings.Join(f.calls, ", ")
	want := "GET vmm.ping, GET vm.info, PUT vm.create, PUT vm.power-button, PUT vm.boot, GET vm.info, PUT vm.power-button, PUT vmm.shutdown"
	if got != want || !f.stopped || f.state != StateShutdown {
		t.Fatalf("calls %s\nwant  %s (stopped %v, state %s)", got, want, f.stopped, f.state)
	}
}

// TestClientReportsBadConfig: the fake refuses a config with a field the API does not define,
// so the client's configuration and the published schema cannot drift apart unnoticed.
func TestClientReportsBadConfig(t *testing.T) {
	_, c := startFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.do(ctx, http.MethodPut, "vm.create", map[string]any{"payload": map[string]any{}, "cpus": map[string]any{"boot_vcpus": 1, "max_vcpus": 1}, "memory": map[string]any{"size": 1}, "bogus": true}, nil)
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("bad config: %v", err)
	}
	if err := c.Create(ctx, VMConfig{}); err == nil || !strings.Contains(err.Error(), "boot_vcpus") {
		t.Fatalf("an empty VMConfig (cpus.boot_vcpus=0): %v, want HTTP 400 naming boot_vcpus", err)
	}
}

func TestClientNoSocket(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "missing.sock"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx); err == nil || !strings.Contains(err.Error(), "vmm.ping") {
		t.Fatalf("Ping without a server: %v", err)
	}
}
