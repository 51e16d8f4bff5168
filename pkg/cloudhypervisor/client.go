package cloudhypervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// VM states reported by vm.info.
const (
	StateCreated  = "Created"
	StateRunning  = "Running"
	StateShutdown = "Shutdown"
	StatePaused   = "Paused"
)

// Client calls cloud-hypervisor's REST API on its unix socket.
type Client struct {
	http *http.Client
}

// NewClient returns a client for the API socket at path.
func NewClient(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}
	return &Client{http: &http.Client{Transport: tr}}
}

// PingResponse is the API's VmmPingResponse.
type PingResponse struct {
	BuildVersion string `json:"build_version,omitempty"`
	Version      string `json:"version"`
	PID          int64  `json:"pid,omitempty"`
}

// VMInfo is the part of the API's VmInfo the runner reads.
type VMInfo struct {
	State  string   `json:"state"`
	Config VMConfig `json:"config"`
	// MemoryActualSize is the guest's memory with what it really plugged of the hotplug region.
	MemoryActualSize int64 `json:"memory_actual_size,omitempty"`
}

// VMResize is the API's VmResize: the vCPU count and total RAM in bytes the guest should have.
type VMResize struct {
	DesiredVCPUs int32 `json:"desired_vcpus,omitempty"`
	DesiredRAM   int64 `json:"desired_ram,omitempty"`
}

// Error is a non-2xx answer; Body is cloud-hypervisor's own explanation.
type Error struct {
	Endpoint string
	Status   int
	Body     string
}

func (e *Error) Error() string {
	return fmt.Sprintf("cloud-hypervisor %s: HTTP %d: %s", e.Endpoint, e.Status, strings.TrimSpace(e.Body))
}

func (c *Client) do(ctx context.Context, method, endpoint string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	// The host part is ignored on a unix socket; "localhost" matches the API's server URL.
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost/api/v1/"+endpoint, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("cloud-hypervisor %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return &Error{Endpoint: endpoint, Status: resp.StatusCode, Body: string(b)}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("cloud-hypervisor %s: decode answer: %w", endpoint, err)
		}
	}
	return nil
}

// Ping asks the VMM for its version (GET vmm.ping).
func (c *Client) Ping(ctx context.Context) (PingResponse, error) {
	var r PingResponse
	err := c.do(ctx, http.MethodGet, "vmm.ping", nil, &r)
	return r, err
}

// Create creates the VM without booting it (PUT vm.create).
func (c *Client) Create(ctx context.Context, cfg VMConfig) error {
	return c.do(ctx, http.MethodPut, "vm.create", cfg, nil)
}

// Boot boots the created VM (PUT vm.boot).
func (c *Client) Boot(ctx context.Context) error {
	return c.do(ctx, http.MethodPut, "vm.boot", nil, nil)
}

// Info returns the VM's state and configuration (GET vm.info).
func (c *Client) Info(ctx context.Context) (VMInfo, error) {
	var r VMInfo
	err := c.do(ctx, http.MethodGet, "vm.info", nil, &r)
	return r, err
}

// PowerButton presses the guest's ACPI power button (PUT vm.power-button).
func (c *Client) PowerButton(ctx context.Context) error {
	return c.do(ctx, http.MethodPut, "vm.power-button", nil, nil)
}

// ShutdownVM stops the VM at once (PUT vm.shutdown).
func (c *Client) ShutdownVM(ctx context.Context) error {
	return c.do(ctx, http.MethodPut, "vm.shutdown", nil, nil)
}

// ShutdownVMM ends the cloud-hypervisor process (PUT vmm.shutdown).
func (c *Client) ShutdownVMM(ctx context.Context) error {
	return c.do(ctx, http.MethodPut, "vmm.shutdown", nil, nil)
}

// Resize asks for a new vCPU count and memory size (PUT vm.resize); the guest takes them after.
func (c *Client) Resize(ctx context.Context, r VMResize) error {
	return c.do(ctx, http.MethodPut, "vm.resize", r, nil)
}
