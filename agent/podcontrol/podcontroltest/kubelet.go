package podcontroltest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Kubelet is the kubelet's pod-resources API, a real gRPC server on a unix socket: List answers
// with each pod's runner container holding a KVM device and its control device.
type Kubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	mu      sync.Mutex
	devices map[string]string // namespace/name → device id
}

// Set gives pod namespace/name control device id.
func (k *Kubelet) Set(namespace, name, id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.devices[namespace+"/"+name] = id
}

func (k *Kubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for key, id := range k.devices {
		ns, name, _ := strings.Cut(key, "/")
		resp.PodResources = append(resp.PodResources, &podresourcesv1.PodResources{Namespace: ns, Name: name,
			Containers: []*podresourcesv1.ContainerResources{{Name: vmv1.RunnerContainer, Devices: []*podresourcesv1.ContainerDevices{
				{ResourceName: string(vmv1.ResourceKVM), DeviceIds: []string{"kvm3"}},
				{ResourceName: string(vmv1.ResourceControl), DeviceIds: []string{id}},
			}}}})
	}
	return resp, nil
}

// startKubelet serves a Kubelet, knowing no device yet (Set gives them), until the test ends
// and returns it and its socket.
func startKubelet(t testing.TB) (*Kubelet, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "kl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	k := &Kubelet{devices: map[string]string{}}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, k)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return k, sock
}
