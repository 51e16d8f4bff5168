package deviceplugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// fakeKubelet is a real gRPC Registration server on kubelet.sock, as the kubelet serves it.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	srv  *grpc.Server
	reqs chan *pluginapi.RegisterRequest
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.reqs <- r
	return &pluginapi.Empty{}, nil
}

func startKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	path := filepath.Join(dir, kubeletSocketName)
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{srv: grpc.NewServer(), reqs: make(chan *pluginapi.RegisterRequest, 4)}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(l) }()
	t.Cleanup(k.srv.Stop)
	return k
}

func (k *fakeKubelet) registered(t *testing.T) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case r := <-k.reqs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin did not register")
		return nil
	}
}

// dialPlugin connects to the plugin's endpoint the way the kubelet does after Register.
func dialPlugin(t *testing.T, dir, endpoint string) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

// healthFollows: the stream lists n devices, unhealthy first, then healthy and unhealthy again
// as set says.
func healthFollows(t *testing.T, s grpc.ServerStreamingClient[pluginapi.ListAndWatchResponse], n int, set func(bool), what string) {
	t.Helper()
	if got, h := recvDevices(t, s); got != n || h[pluginapi.Unhealthy] != n {
		t.Fatalf("first list: %d devices, health %v; want %d unhealthy", got, h, n)
	}
	for _, healthy := range []bool{true, false} {
		set(healthy)
		want := pluginapi.Unhealthy
		if healthy {
			want = pluginapi.Healthy
		}
		if got, h := recvDevices(t, s); got != n || h[want] != n {
			t.Fatalf("after %s = %v: %d devices, health %v; want %d %s", what, healthy, got, h, n, want)
		}
	}
}

func recvDevices(t *testing.T, s grpc.ServerStreamingClient[pluginapi.ListAndWatchResponse]) (n int, health map[string]int) {
	t.Helper()
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	health = map[string]int{}
	for _, d := range r.Devices {
		health[d.Health]++
	}
	return len(r.Devices), health
}

func TestPluginWithKubelet(t *testing.T) {
	dir, err := os.MkdirTemp("", "dp") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	kubelet := startKubelet(t, dir)

	p := New(Options{Dir: dir, Count: 8, Poll: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	req := kubelet.registered(t)
	if req.Version != pluginapi.Version || req.ResourceName != string(vmv1.ResourceKVM) || req.Endpoint != DefaultSocket {
		t.Fatalf("register request %+v", req)
	}
	c := dialPlugin(t, dir, req.Endpoint)
	lw, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	// Unhealthy until told otherwise: no probe has passed yet.
	healthFollows(t, lw, 8, p.SetHealthy, "SetHealthy")

	resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"kvm0"}}, {DevicesIds: []string{"kvm1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ContainerResponses) != 2 {
		t.Fatalf("allocate: %+v", resp)
	}
	for _, cr := range resp.ContainerResponses {
		if len(cr.Devices) != 1 || cr.Devices[0].HostPath != "/dev/kvm" || cr.Devices[0].ContainerPath != "/dev/kvm" || cr.Devices[0].Permissions != "rw" {
			t.Errorf("allocate response %+v", cr.Devices)
		}
	}
	if _, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
		t.Fatal(err)
	}

	// A kubelet restart: it stops, removes every plugin socket, and serves a new kubelet.sock.
	kubelet.srv.Stop()
	_ = os.Remove(filepath.Join(dir, DefaultSocket))
	_ = os.Remove(filepath.Join(dir, kubeletSocketName))
	kubelet2 := startKubelet(t, dir)
	req = kubelet2.registered(t)
	if req.ResourceName != string(vmv1.ResourceKVM) {
		t.Fatalf("re-register request %+v", req)
	}
	p.SetHealthy(true)
	lw2, err := dialPlugin(t, dir, req.Endpoint).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if n, h := recvDevices(t, lw2); n != 8 || h[pluginapi.Healthy] != 8 {
		t.Fatalf("after re-registering: %d devices, health %v", n, h)
	}
	// Counted when Register returns, which is just after the kubelet saw it.
	for i := 0; p.Registrations() != 2 && i < 100; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if p.Registrations() != 2 {
		t.Errorf("registrations %d, want 2", p.Registrations())
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if _, err := os.Stat(filepath.Join(dir, DefaultSocket)); err == nil {
		t.Error("plugin socket left behind")
	}
}

// TestPluginWaitsForKubelet: started before the kubelet, the plugin registers once it appears.
func TestPluginWaitsForKubelet(t *testing.T) {
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := New(Options{Dir: dir, Poll: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.Run(ctx) }()
	time.Sleep(200 * time.Millisecond)
	if p.Registrations() != 0 {
		t.Fatal("registered without a kubelet")
	}
	kubelet := startKubelet(t, dir)
	if req := kubelet.registered(t); req.ResourceName != string(vmv1.ResourceKVM) {
		t.Fatalf("%+v", req)
	}
}

// TestProbeAndKVMResources: the two resources `virtpod-agent device-plugin` serves, side by side
// with one kubelet. kvm-probe: one device, always healthy, /dev/kvm allocated only while the
// host's device (a temp file here) exists. kvm: health follows the value fed to Healthy (what
// the node's HypervisorNode says).
func TestProbeAndKVMResources(t *testing.T) {
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	hostDev := filepath.Join(dir, "host-kvm")
	if err := os.WriteFile(hostDev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	kubelet := startKubelet(t, dir)

	var usable atomic.Bool
	probe := New(Options{Dir: dir, Socket: ProbeSocket, ResourceName: string(vmv1.ResourceKVMProbe), Count: 1, IDPrefix: "kvm-probe",
		CheckPath: hostDev, Healthy: func() bool { return true }, Poll: 50 * time.Millisecond})
	kvm := New(Options{Dir: dir, Count: 4, CheckPath: hostDev, Healthy: usable.Load, Poll: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = probe.Run(ctx) }()
	go func() { _ = kvm.Run(ctx) }()

	endpoints := map[string]string{}
	for range 2 {
		r := kubelet.registered(t)
		endpoints[r.ResourceName] = r.Endpoint
	}
	if endpoints[string(vmv1.ResourceKVMProbe)] != ProbeSocket || endpoints[string(vmv1.ResourceKVM)] != DefaultSocket {
		t.Fatalf("registrations %v", endpoints)
	}

	pc := dialPlugin(t, dir, ProbeSocket)
	lw, err := pc.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	// Healthy is asked as Run starts; the first list may come just before.
	n, h := recvDevices(t, lw)
	if n == 1 && h[pluginapi.Unhealthy] == 1 {
		n, h = recvDevices(t, lw)
	}
	if n != 1 || h[pluginapi.Healthy] != 1 {
		t.Fatalf("kvm-probe: %d devices, health %v; want 1 healthy", n, h)
	}

	allocate := func(c pluginapi.DevicePluginClient, id string) []*pluginapi.DeviceSpec {
		t.Helper()
		resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{id}}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.ContainerResponses) != 1 {
			t.Fatalf("allocate: %+v", resp)
		}
		return resp.ContainerResponses[0].Devices
	}
	if d := allocate(pc, "kvm-probe0"); len(d) != 1 || d[0].HostPath != "/dev/kvm" || d[0].ContainerPath != "/dev/kvm" || d[0].Permissions != "rw" {
		t.Errorf("kvm-probe allocate with the host device present: %+v", d)
	}
	if err := os.Remove(hostDev); err != nil {
		t.Fatal(err)
	}
	if d := allocate(pc, "kvm-probe0"); len(d) != 0 {
		t.Errorf("kvm-probe allocate without a host device: %+v, want none", d)
	}

	kc := dialPlugin(t, dir, DefaultSocket)
	lw2, err := kc.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	healthFollows(t, lw2, 4, usable.Store, "the HypervisorNode's kvm Usable")
}
