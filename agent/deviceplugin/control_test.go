package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestControlAllocate: each container gets its device's directory, created, emptied of what an
// earlier pod left, and mounted at the runner's control directory; no device node, no other
// directory.
func TestControlAllocate(t *testing.T) {
	root := t.TempDir()
	p := New(ControlOptions(Options{}, filepath.Join(root, "seen"), "/var/lib/virtpod/control", 3))
	if err := os.MkdirAll(filepath.Join(root, "seen", "control1"), 0o755); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(root, "seen", "control1", vmv1.ControlSocketName)
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	resp, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"control1"}}, {DevicesIds: []string{"control2"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ContainerResponses) != 2 {
		t.Fatalf("%d responses, want 2", len(resp.ContainerResponses))
	}
	for i, id := range []string{"control1", "control2"} {
		cr := resp.ContainerResponses[i]
		if len(cr.Devices) != 1 || len(cr.Envs) != 0 || len(cr.Mounts) != 1 {
			t.Fatalf("container %d: %+v, want one mount, the tun device and nothing else", i, cr)
		}
		if d := cr.Devices[0]; d.ContainerPath != "/dev/net/tun" || d.HostPath != "/dev/net/tun" || d.Permissions != "rw" {
			t.Errorf("container %d device %+v, want /dev/net/tun read-write", i, d)
		}
		m := cr.Mounts[0]
		if m.ContainerPath != vmv1.ControlDir || m.HostPath != "/var/lib/virtpod/control/"+id || m.ReadOnly {
			t.Errorf("container %d mount %+v", i, m)
		}
		fi, err := os.Stat(filepath.Join(root, "seen", id))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v, %v; want a 0700 directory", id, fi, err)
		}
		// The runner's user's: the runner, with no capability, makes its sockets there.
		if st := fi.Sys().(*syscall.Stat_t); int64(st.Uid) != vmv1.RunnerUID || int64(st.Gid) != vmv1.RunnerGID {
			t.Errorf("%s is %d:%d, want the runner's %d:%d", id, st.Uid, st.Gid, vmv1.RunnerUID, vmv1.RunnerGID)
		}
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the earlier pod's socket is still there: %v", err)
	}
	for _, bad := range [][]string{{"../etc"}, {"control0", "control1"}, {"kvm0"}} {
		_, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: bad}}})
		if err == nil || !strings.Contains(err.Error(), string(vmv1.ResourceControl)) {
			t.Errorf("devices %v: %v, want a refusal naming the resource", bad, err)
		}
	}
}

// TestControlRegistersAndLists: the control plugin registers its own resource and lists its
// devices healthy from the start.
func TestControlRegistersAndLists(t *testing.T) {
	dir := t.TempDir()
	k := startKubelet(t, dir)
	p := New(ControlOptions(Options{Dir: dir, Poll: 50 * 1e6}, t.TempDir(), "", 5))
	p.SetHealthy(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = p.Run(ctx) }()
	r := k.registered(t)
	if r.ResourceName != string(vmv1.ResourceControl) || r.Endpoint != ControlSocket {
		t.Fatalf("registered %+v", r)
	}
	s, err := dialPlugin(t, dir, r.Endpoint).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if n, h := recvDevices(t, s); n != 5 || h[pluginapi.Healthy] != 5 {
		t.Fatalf("%d devices, health %v; want 5 healthy", n, h)
	}
}
