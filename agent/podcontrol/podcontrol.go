// Package podcontrol finds a runner pod's control directory on the node: which
// devices.virtpod.io/control device the kubelet gave the pod's runner container, and so where its
// control socket (and, for live migration, its migration sockets) are; and Agent, what each of
// the node agent's executors acts with.
package podcontrol

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// DefaultPodResourcesSocket is the kubelet's pod-resources socket.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Device asks the kubelet which devices.virtpod.io/control device it gave the runner container
// of pod namespace/name: the kubelet, not the pod, says which socket is whose, so a pod cannot
// point the agent at another VM's runner.
func Device(ctx context.Context, socket, namespace, name string) (string, error) {
	devs, err := Devices(ctx, socket)
	if err != nil {
		return "", err
	}
	return devs.Of(namespace, name)
}

// PodDevices is the kubelet's answer for every pod: the control device of each pod's runner
// container ("" for a listed pod without one), by namespace/name.
type PodDevices map[string]string

// Devices asks the kubelet for every pod's control device at once (the pod-resources API is
// rate-limited: one List serves every pod it names).
func Devices(ctx context.Context, socket string) (PodDevices, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("the kubelet's pod-resources API (%s): %w", socket, err)
	}
	devs := PodDevices{}
	for _, p := range list.GetPodResources() {
		key := p.GetNamespace() + "/" + p.GetName()
		devs[key] = ""
		for _, c := range p.GetContainers() {
			// The runner's container, a snapshot's copier's or a hotplugged disk's attachment's
			// (all only the controller makes).
			if c.GetName() != vmv1.RunnerContainer && c.GetName() != vmv1.CopierContainer && c.GetName() != vmv1.AttachmentContainer {
				continue
			}
			for _, d := range c.GetDevices() {
				if d.GetResourceName() == string(vmv1.ResourceControl) && len(d.GetDeviceIds()) == 1 {
					devs[key] = d.GetDeviceIds()[0]
				}
			}
		}
	}
	return devs, nil
}

// Of is pod namespace/name's control device, or why there is none.
func (d PodDevices) Of(namespace, name string) (string, error) {
	id, listed := d[namespace+"/"+name]
	switch {
	case !listed:
		return "", fmt.Errorf("the kubelet does not list pod %s/%s", namespace, name)
	case id == "":
		return "", fmt.Errorf("the kubelet gave pod %s/%s no %s device (a runner pod made before the control channel: it has one after its next start)", namespace, name, vmv1.ResourceControl)
	}
	return id, nil
}

// Lookup is the control directory of pod namespace/name's runner as the agent sees it: the
// device's directory under controlDir (where the agent mounts vmv1.HostControlDir).
func Lookup(ctx context.Context, podResources, controlDir, namespace, name string) (Control, error) {
	id, err := Device(ctx, podResources, namespace, name)
	if err != nil {
		return Control{}, err
	}
	return Control{Root: controlDir, Device: id}, nil
}

// DeviceCache is the kubelet's pod-resources answer shared by the pods an agent's executor
// follows, asked again only when older than Every: the kubelet rate-limits that API (100
// requests a second, node-wide), and starting pods are looked up every few milliseconds.
type DeviceCache struct {
	Socket string // the kubelet's pod-resources socket
	Every  time.Duration

	mu   sync.Mutex
	at   time.Time
	devs PodDevices
}

// Of is pod namespace/name's control device from the latest answer, or why there is none.
func (d *DeviceCache) Of(ctx context.Context, namespace, name string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.devs == nil || time.Since(d.at) >= d.Every {
		devs, err := Devices(ctx, d.Socket)
		if err != nil {
			return "", err
		}
		d.devs, d.at = devs, time.Now()
	}
	return d.devs.Of(namespace, name)
}
