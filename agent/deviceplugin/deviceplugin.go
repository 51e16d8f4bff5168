// Package deviceplugin serves /dev/kvm to pods as extended resources through the kubelet's
// device-plugin API, so pods get the device without privileges. One Plugin serves one resource
// (its own socket and registration); `virtpod-agent device-plugin` runs two (the names are
// vmv1.ResourceKVMProbe and vmv1.ResourceKVM):
//
//   - devices.virtpod.io/kvm-probe: one device, always Healthy, for the node agent's probe. Its
//     Allocate hands over /dev/kvm only when the node has one (CheckPath), so the agent starts
//     on every node and finds KVM Absent where there is none.
//   - devices.virtpod.io/kvm: Count identical devices (/dev/kvm can be shared by any number of
//     VMs), Healthy only while the node's HypervisorNode says KVM is Usable (Options.Healthy,
//     answered by HypervisorNodeStatus.KVMUsableAt).
//     On a node where it is not, the kubelet reports them in capacity but allocates none, and a
//     VM that needs KVM stays Pending with "Insufficient devices.virtpod.io/kvm" instead of
//     starting a guest that would hang.
//   - devices.virtpod.io/control (control.go): a directory per device, mounted into the runner
//     for its control socket, which the node agent reaches from the host.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/runner/kvm"
)

// Defaults; the resource is vmv1.ResourceKVM and the device runner/kvm's.
const (
	DefaultDir    = pluginapi.DevicePluginPath
	DefaultSocket = "virtpod-kvm.sock"
	DefaultCount  = 64
	// ProbeSocket is the socket of the node agent's own resource, vmv1.ResourceKVMProbe.
	ProbeSocket = "virtpod-kvm-probe.sock"
	// kubeletSocketName is the kubelet's registration socket in the plugin directory.
	kubeletSocketName = "kubelet.sock"
)

// Options configure a Plugin; zero values take the defaults above.
type Options struct {
	Dir          string // the kubelet's device-plugin directory
	Socket       string // this plugin's socket name in Dir
	ResourceName string
	Count        int
	Device       string // device node handed to containers, same path inside and out
	// IDPrefix names the devices: IDPrefix0, IDPrefix1, ... (default "kvm").
	IDPrefix string
	// CheckPath, when set, is where the plugin sees the node's Device (the host's /dev mounted
	// read-only elsewhere): Allocate hands over Device only while CheckPath exists.
	CheckPath string
	// Healthy, when set, is asked every HealthPoll (default Poll) while Run runs; its answer is
	// passed to SetHealthy.
	Healthy    func() bool
	HealthPoll time.Duration
	// ControlRoot, when set, makes this the control plugin (control.go): Allocate hands out
	// the directory ControlRoot/<device> (where the plugin sees it; on the node it is
	// ControlHostDir/<device>) mounted at vmv1.ControlDir, instead of a device node.
	ControlRoot    string
	ControlHostDir string
	// Poll is how often the plugin checks that the kubelet and its own socket are still there.
	Poll time.Duration
	Log  *zap.Logger
}

// Plugin is the device plugin. Use New, then Run; SetHealthy at any time.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	o Options

	mu      sync.Mutex
	healthy bool
	changed chan struct{} // closed and replaced on every health change
	reg     int           // successful registrations, for tests and logs
}

// New makes a plugin that starts unhealthy: nothing is advertised as usable before a probe says so.
func New(o Options) *Plugin {
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.Socket == "" {
		o.Socket = DefaultSocket
	}
	if o.ResourceName == "" {
		o.ResourceName = string(vmv1.ResourceKVM)
	}
	if o.Count <= 0 {
		o.Count = DefaultCount
	}
	if o.Device == "" {
		o.Device = kvm.DefaultDevice
	}
	if o.IDPrefix == "" {
		o.IDPrefix = "kvm"
	}
	if o.Poll <= 0 {
		o.Poll = 2 * time.Second
	}
	if o.HealthPoll <= 0 {
		o.HealthPoll = o.Poll
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	return &Plugin{o: o, changed: make(chan struct{})}
}

// SetHealthy marks every device healthy or not; open ListAndWatch streams get the new list.
func (p *Plugin) SetHealthy(h bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h == p.healthy {
		return
	}
	p.healthy = h
	close(p.changed)
	p.changed = make(chan struct{})
}

// Registrations counts successful registrations with a kubelet.
func (p *Plugin) Registrations() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reg
}

func (p *Plugin) devices() ([]*pluginapi.Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	health := pluginapi.Unhealthy
	if p.healthy {
		health = pluginapi.Healthy
	}
	devs := make([]*pluginapi.Device, p.o.Count)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: p.o.IDPrefix + strconv.Itoa(i), Health: health}
	}
	return devs, p.changed
}

// GetDevicePluginOptions: no pre-start hook and no preferred allocation; the devices are alike.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the device list now and again on every health change.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		devs, changed := p.devices()
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-s.Context().Done():
			return nil
		}
	}
}

// Allocate hands each container the KVM device read-write; the container stays unprivileged.
// With CheckPath set and missing (a node without KVM) the containers get no device.
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	if p.o.ControlRoot != "" {
		return p.allocateControl(req)
	}
	present := true
	if p.o.CheckPath != "" {
		if _, err := os.Stat(p.o.CheckPath); err != nil {
			present = false
		}
	}
	resp := &pluginapi.AllocateResponse{}
	for range req.ContainerRequests {
		cr := &pluginapi.ContainerAllocateResponse{}
		if present {
			cr.Devices = []*pluginapi.DeviceSpec{{ContainerPath: p.o.Device, HostPath: p.o.Device, Permissions: "rw"}}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

// PreStartContainer is not requested (GetDevicePluginOptions), but answers if called.
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// Run serves the plugin and registers it until ctx ends. A kubelet that restarts deletes every
// plugin socket and makes a new kubelet.sock; Run notices either and serves and registers again.
// Registration failures (no kubelet yet) are retried every Poll.
func (p *Plugin) Run(ctx context.Context) error {
	kubelet := filepath.Join(p.o.Dir, kubeletSocketName)
	if p.o.Healthy != nil {
		go p.followHealth(ctx)
	}
	for {
		srv, err := p.serve()
		if err != nil {
			return err
		}
		kubeletID, registered := p.registerLoop(ctx, kubelet)
		if registered {
			p.watch(ctx, kubelet, kubeletID)
		}
		srv.Stop()
		if ctx.Err() != nil {
			_ = os.Remove(p.socketPath())
			return nil
		}
		p.o.Log.Info("kubelet restarted or plugin socket removed; registering again")
	}
}

// followHealth asks Options.Healthy now and every HealthPoll until ctx ends.
func (p *Plugin) followHealth(ctx context.Context) {
	t := time.NewTicker(p.o.HealthPoll)
	defer t.Stop()
	for {
		p.SetHealthy(p.o.Healthy())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Plugin) socketPath() string { return filepath.Join(p.o.Dir, p.o.Socket) }

func (p *Plugin) serve() (*grpc.Server, error) {
	path := p.socketPath()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale plugin socket: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("device plugin socket (is %s the kubelet's device-plugin directory, mounted?): %w", p.o.Dir, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}

// registerLoop registers with the kubelet, retrying until it succeeds or ctx ends. It returns
// the identity of the kubelet socket it registered with.
func (p *Plugin) registerLoop(ctx context.Context, kubelet string) (fileID, bool) {
	for {
		id, err := statID(kubelet)
		if err == nil {
			if err = p.register(ctx, kubelet); err == nil {
				p.mu.Lock()
				p.reg++
				p.mu.Unlock()
				p.o.Log.Info("registered with the kubelet", zap.String("resource", p.o.ResourceName), zap.String("socket", p.socketPath()))
				return id, true
			}
		}
		p.o.Log.Warn("device plugin not registered yet; retrying", zap.String("kubeletSocket", kubelet), zap.Error(err))
		select {
		case <-ctx.Done():
			return fileID{}, false
		case <-time.After(p.o.Poll):
		}
		if _, err := os.Stat(p.socketPath()); err != nil {
			return fileID{}, false // our socket was removed meanwhile: serve again first
		}
	}
}

func (p *Plugin) register(ctx context.Context, kubelet string) error {
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.o.Socket,
		ResourceName: p.o.ResourceName,
		Options:      &pluginapi.DevicePluginOptions{},
	})
	return err
}

// watch returns when ctx ends, our socket disappears, or kubelet.sock is a different file.
func (p *Plugin) watch(ctx context.Context, kubelet string, id fileID) {
	t := time.NewTicker(p.o.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := os.Stat(p.socketPath()); err != nil {
			return
		}
		if now, err := statID(kubelet); err == nil && now != id {
			return
		}
	}
}

// fileID tells a re-created socket from the old one (same path, new inode or ctime).
type fileID struct {
	dev, ino uint64
	ctime    int64
}

func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("%s: no stat", path)
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, ctime: st.Ctim.Nano()}, nil
}
