package deviceplugin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Control devices (vmv1.ResourceControl): each is a directory on the node,
// vmv1.HostControlDir/<device id>, that Allocate empties and mounts into the runner container
// at vmv1.ControlDir. The runner serves its control API on a socket there; the node agent,
// which mounts vmv1.HostControlDir, finds which directory is which pod's through the kubelet's
// pod-resources API. VM pods get it without a hostPath volume, and see only their own.

// TunDevice is the tun/tap device every runner container gets with its control directory.
const TunDevice = "/dev/net/tun"

// ControlSocket is the control plugin's socket name in the device-plugin directory.
const ControlSocket = "virtpod-control.sock"

// DefaultControlCount is how many control devices a node offers: as many as the kubelet's
// default pod limit, so they never limit VMs before pods do.
const DefaultControlCount = 110

// ControlOptions are the Options of the control plugin, the rest taken from o.
func ControlOptions(o Options, root, hostDir string, count int) Options {
	o.Socket, o.ResourceName, o.IDPrefix = ControlSocket, string(vmv1.ResourceControl), "control"
	o.Count, o.ControlRoot, o.ControlHostDir = count, root, hostDir
	o.Healthy, o.CheckPath = nil, ""
	return o
}

// allocateControl gives each container its device's directory, emptied: a socket left by the
// device's previous pod must not be taken for the new runner's.
func (p *Plugin) allocateControl(req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	hostDir := p.o.ControlHostDir
	if hostDir == "" {
		hostDir = p.o.ControlRoot
	}
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		if len(cr.DevicesIds) != 1 {
			return nil, fmt.Errorf("%s: a container takes exactly one control device, asked for %d", vmv1.ResourceControl, len(cr.DevicesIds))
		}
		id := cr.DevicesIds[0]
		if !strings.HasPrefix(id, p.o.IDPrefix) || strings.ContainsAny(id, `/\`) || id == "." || id == ".." {
			return nil, fmt.Errorf("%s: %q is not one of this plugin's devices", vmv1.ResourceControl, id)
		}
		dir := filepath.Join(p.o.ControlRoot, id)
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("emptying control directory %s: %w", dir, err)
		}
		// 0700 and the runner's user's: the runner (vmv1.RunnerUID in its container) makes its
		// sockets there, and the agent (root on the host, CAP_DAC_OVERRIDE) reaches them.
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("control directory %s (is %s mounted from the node?): %w", dir, p.o.ControlRoot, err)
		}
		if err := os.Chown(dir, int(vmv1.RunnerUID), int(vmv1.RunnerGID)); err != nil {
			return nil, fmt.Errorf("control directory %s for the runner's user (the device plugin needs CAP_CHOWN): %w", dir, err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Mounts: []*pluginapi.Mount{{ContainerPath: vmv1.ControlDir, HostPath: filepath.Join(hostDir, id)}},
			// The runner opens the tap the agent made its own; it cannot create the device node
			// (no CAP_MKNOD), so the runtime does, owned by the container's user where containerd
			// has device_ownership_from_security_context (docs/security.md).
			Devices: []*pluginapi.DeviceSpec{{ContainerPath: TunDevice, HostPath: TunDevice, Permissions: "rw"}},
		})
	}
	return resp, nil
}
